//! The workspace's foreign-producer fixture (the `dlpack-testing` crate, shared by every
//! crate's tests).
pub(crate) use dlpack_testing::*;
