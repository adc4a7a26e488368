//! Where Qanat's domains meet, shared by the `qanat` binary and its tests: the
//! services built once in dependency order with every domain's migrations
//! ([`wiring`]), the job kinds whose processes are this binary's workers ([`kinds`]),
//! and the feature store as serving's source of online features ([`enrichment`]).

pub mod enrichment;
pub mod kinds;
pub mod wiring;
