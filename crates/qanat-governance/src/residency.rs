//! Data residency: bytes of a project may only land in its allowed regions.

use qanat_store::LocationInfo;

use crate::{Error, Project};

/// Refuses a write of `project`'s bytes to `location` unless the location's region is one
/// the project allows. Every path that moves bytes calls this before it writes.
pub fn check_residency(project: &Project, location: &LocationInfo) -> Result<(), Error> {
    if project
        .allowed_regions
        .iter()
        .any(|r| r == location.region.as_str())
    {
        Ok(())
    } else {
        Err(Error::Residency {
            project: project.name.clone(),
            location: location.name.clone(),
            region: location.region.to_string(),
            allowed: project.allowed_regions.clone(),
        })
    }
}
