"""What every backend shares: the protocol and builder, limit signals, the meter, endpoint probes, claims."""
