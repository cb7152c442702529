"""The seed example: a tiny classifier trained for 3 epochs on 2 CPU processes (or one per GPU).

Run it with `python quickstart.py`. The same `train` function works unchanged in a notebook cell,
under `notebook-launcher launch`, under `torchrun`, or as one plain process.
"""

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

from notebook_launcher import Accelerator, notebook_launch
from notebook_launcher.system.hardware import detect


class DiyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        return self.fc(x)


class DiyDataset(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, idx):
        return torch.randn(10), torch.randint(0, 2, (1,)).item()


def train(epochs=3):
    accelerator = Accelerator()  # Accelerator(mixed_precision="fp16") also works
    model = DiyModel()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    dataloader = DataLoader(DiyDataset(), batch_size=32, shuffle=True)
    model, optimizer, dataloader, criterion = accelerator.prepare(model, optimizer, dataloader, criterion)
    model.train()
    for epoch in range(epochs):
        total_loss = 0.0
        for x, y in dataloader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            total_loss += loss.item()
        print(f"Epoch {epoch + 1}, Loss: {total_loss / len(dataloader):.4f}")
    return {"rank": accelerator.process_index, "final_loss": round(total_loss / len(dataloader), 4)}


if __name__ == "__main__":  # needed where workers start with spawn (macOS, or CUDA already in use)
    num_processes = detect().cuda_device_count or 2  # one process per GPU, else 2 CPU processes
    result = notebook_launch(train, args=(3,), num_processes=num_processes)
    for rank, value in enumerate(result):
        print(f"rank {rank} returned {value}")
    print(f"done in {result.duration:.1f}s with {len(result)} processes ({result.start_method})")
