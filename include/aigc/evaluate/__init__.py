"""Stage 5: how good the generated content is (alignment, fidelity, safety), at what cost (Pareto), and promotion."""
