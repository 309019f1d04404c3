"""Detector plugins used by the tests, loaded through monkeypatched entry points."""
