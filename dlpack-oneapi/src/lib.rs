//! Level Zero USM <-> DLPack as kDLOneAPI, with USM pointer -> device hooks.
