"""Mixed precision: autocast, grad scaler, fp32 outputs (mixed.py) and fp8 through torchao."""
