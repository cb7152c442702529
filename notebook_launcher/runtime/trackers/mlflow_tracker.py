"""MLflow: one run in the experiment named after the project, in MLflow's own store (MLFLOW_TRACKING_URI,
else MLflow's default); `logging_dir` is the new experiment's artifact location, as in Accelerate.

A resumed run reopens the saved `run_id` (its metric history continues); a run opened by
`init_trackers` before `load_state` that logged no metric is deleted, so the experiment shows one run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..probes import parse_flag_from_env
from .base import ResumableTracker, on_main_process


class MLflowTracker(ResumableTracker):
    """Accelerate's MLflowTracker; MLFLOW_EXPERIMENT_NAME, MLFLOW_RUN_ID, MLFLOW_TAGS and
    MLFLOW_NESTED_RUN win over the matching arguments."""

    name = "mlflow"
    requires_logging_directory = False
    packages = (("mlflow", ("mlflow", "mlflow-skinny")),)
    handle = "active_run"
    active_run: Any  # mlflow's ActiveRun, set by start()

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | None = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(run_name)
        tags = os.environ.get("MLFLOW_TAGS", tags)
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.logging_dir = logging_dir
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        self.tags = json.loads(tags) if isinstance(tags, str) else tags
        # the variable is read as a yes/no flag, so MLFLOW_NESTED_RUN=false turns nesting off (Accelerate's)
        nested_flag = "MLFLOW_NESTED_RUN" in os.environ
        self.nested_run = parse_flag_from_env("MLFLOW_NESTED_RUN") if nested_flag else nested_run
        self.description = description
        self._dropped: set[str] = set()

    def _open(self, kwargs: dict) -> Any:
        import mlflow

        run_id = self.run_id or (self._resume or {}).get("run_id")
        experiment_id = None if run_id else self._experiment_id(mlflow)
        return mlflow.start_run(
            run_id=run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=bool(
                self.nested_run
            ),  # None (allowed by the signature) as False: mlflow reads it as a flag
            tags=self.tags,
            description=self.description,
        )

    def _experiment_id(self, mlflow: Any) -> str:
        found = mlflow.search_experiments(filter_string=f"name = '{self.experiment_name}'")
        if found:
            return found[0].experiment_id
        return mlflow.create_experiment(
            name=self.experiment_name, artifact_location=self.logging_dir, tags=self.tags
        )

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        """Values as run parameters, in batches MLflow accepts; over-long values are dropped, said once."""
        import mlflow
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        kept = []
        for key, value in values.items():
            if len(str(value)) > MAX_PARAM_VAL_LENGTH:
                self._say_dropped(key, f"its value is longer than MLflow's {MAX_PARAM_VAL_LENGTH} characters")
            else:
                kept.append((key, value))
        for i in range(0, len(kept), MAX_PARAMS_TAGS_PER_BATCH):
            mlflow.log_params(dict(kept[i : i + MAX_PARAMS_TAGS_PER_BATCH]))

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        """Numbers as metrics; anything else is dropped (MLflow metrics are numbers), said once per key."""
        import mlflow

        metrics = {}
        for key, value in values.items():
            if isinstance(value, (int, float)):
                metrics[key] = value
            else:
                self._say_dropped(key, f"MLflow metrics are numbers and it is a {type(value).__name__}")
        mlflow.log_metrics(metrics, step=step, **kwargs)

    def _say_dropped(self, key: str, why: str) -> None:
        if key not in self._dropped:
            self._dropped.add(key)
            print(f"notebook_launcher: MLflow did not record {key!r}: {why}.", file=sys.stderr)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        import mlflow

        mlflow.log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        import mlflow

        mlflow.log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        import mlflow

        mlflow.log_artifact(local_path=local_path, artifact_path=artifact_path)

    def _end(self) -> None:
        import mlflow

        mlflow.end_run()

    def _saved_run(self) -> dict | None:
        info = self.active_run.info
        return {"run_id": info.run_id, "experiment_id": info.experiment_id}

    def _close_fresh_run(self, discard: bool) -> None:
        import mlflow

        fresh = self.active_run.info.run_id
        mlflow.end_run()
        if discard:
            mlflow.tracking.MlflowClient().delete_run(fresh)
