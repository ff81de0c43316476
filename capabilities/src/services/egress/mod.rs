//! The egress proxy contained runs will reach the network through (issue 55, under way):
//! so far its policy, [`policy`], which decides by name and then by resolved address which
//! connections a run may make. Nothing uses it yet: no configuration key reads it and no
//! run gets a network from it; it becomes a capability (one line in the list) when the
//! proxy that enforces it lands.

pub mod policy;
