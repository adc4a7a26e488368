//! Failures injected at the scheduler's durable steps, in tests only: a test plans
//! that the step named `at` fails (returns an error, as a refused write or a crash
//! before the next step would leave things), then checks what the store holds and
//! what a restart's recovery makes of it. Compiled only into the crate's tests.

#[cfg(test)]
use std::collections::HashMap;
#[cfg(test)]
use std::sync::Mutex;

#[cfg(test)]
use crate::{Error, Result};

/// The failures planned, by step, and the steps reached so far.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// How many more times each step fails.
    plan: Mutex<HashMap<&'static str, u32>>,
    reached: Mutex<Vec<&'static str>>,
}

#[cfg(test)]
impl Faults {
    /// Makes step `at` fail its next `times` passes.
    pub(crate) fn fail(&self, at: &'static str, times: u32) {
        self.plan
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(at, times);
    }

    /// The steps reached (failed or not), in order.
    pub(crate) fn reached(&self) -> Vec<&'static str> {
        self.reached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Passes step `at`: an error when a failure is planned there.
    pub(crate) fn check(&self, at: &'static str) -> Result<()> {
        self.reached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(at);
        let mut plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        match plan.get_mut(at) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err(Error::Io(format!("injected failure at {at}")))
            }
            _ => Ok(()),
        }
    }
}

/// `fault!(inner, "step")`: in tests, fails here when the test planned it; nothing
/// in a build that is not a test.
macro_rules! fault {
    ($inner:expr, $at:literal) => {
        #[cfg(test)]
        $inner.faults.check($at)?;
    };
}
pub(crate) use fault;
