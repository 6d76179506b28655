"""Workload specs and generators built from real traces (agentic, chat, rag, summarization, code, random, trace replay)."""
