//! Side-by-side benchmarks of this workspace against dlpark and NumPy (not published).
