//! Test support only: a Level Zero driver that the real loader can load; not a device backend.
