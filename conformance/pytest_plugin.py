"""pytest plugin of the conformance suite (placeholder until the suite lands)."""
