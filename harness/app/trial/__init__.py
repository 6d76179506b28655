"""One trial of an engine: plan, start-up, warm-up, measure, checks (fidelity, equivalence, parity), and how trials run."""
