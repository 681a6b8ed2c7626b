"""Prefect task wrappers over cudal1: short, retried only where I/O can fail, tagged per device."""
