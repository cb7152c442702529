"""estimate_memory: bytes per rank per strategy, from a model built on the meta device. The
public face and the CLI import it; it imports only system/ and errors."""
