//! cudarc <-> DLPack: CUDA memory as kDLCUDA, pointer -> device hooks and the stream handshake.
