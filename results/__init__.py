"""Versioned result schema and the run store (results/<run-id>/)."""
