"""`python -m client.estimate`: how much GPU time will this take? Calibrate on the fleet, then project."""
