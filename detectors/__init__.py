"""storyd detectors."""
