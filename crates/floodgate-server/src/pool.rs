//! A small pool of [`Response`]s, so that steady traffic reuses their
//! buffers instead of allocating per request.

use std::sync::Mutex;

use floodgate_policy::Response;

/// Most idle responses kept.
const MAX_IDLE: usize = 1024;

/// Reusable responses.
#[derive(Default)]
// Boxed: a response moves in and out of the pool as one pointer.
#[allow(clippy::vec_box)]
pub struct ResponsePool {
    idle: Mutex<Vec<Box<Response>>>,
}

impl ResponsePool {
    /// A response to fill (reused when one is idle).
    pub fn take(&self) -> Pooled<'_> {
        let r = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        Pooled {
            pool: self,
            response: Some(r),
        }
    }
}

/// A response on loan from a [`ResponsePool`]; returned when dropped.
pub struct Pooled<'a> {
    pool: &'a ResponsePool,
    response: Option<Box<Response>>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Response;
    fn deref(&self) -> &Response {
        self.response.as_deref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Response {
        self.response.as_deref_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.response.take() {
            let mut idle = self
                .pool
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(r);
            }
        }
    }
}
