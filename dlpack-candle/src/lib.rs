//! candle <-> DLPack.
