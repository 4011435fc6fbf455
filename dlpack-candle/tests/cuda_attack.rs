//! Placeholder: adversarial cases against dlpack-candle's CUDA paths are being written here.
fn main() {}
