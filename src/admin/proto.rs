//! The code generated from proto/ by build.rs.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("shardcron.admin.v1");
