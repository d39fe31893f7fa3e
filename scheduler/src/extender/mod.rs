//! The upstream HTTP scheduler extender (`KubeSchedulerConfiguration`
//! `extenders`), starting with its wire format ([`wire`]): the JSON bodies
//! kube-scheduler sends and reads, field for field, so an extender written
//! for kube-scheduler works with Flotilla unchanged.
//!
//! Calling extenders from the scheduling cycle is not wired yet: the
//! configuration still refuses a non-empty `extenders` list (see the README).

pub mod wire;
