"""Auto-scheduling search: program features, the learned cost model, and the search itself."""
