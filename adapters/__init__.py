"""One adapter per serving engine behind one small interface (adapters.base)."""
