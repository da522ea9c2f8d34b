//! The seed's just-over-budget frame loop, for the benchmark and the policy choice: every
//! frame, one client locks, uses and unlocks each resource of a working set a little larger
//! than the budget; a resource whose lock fails was deleted and is re-created.

use std::sync::Arc;

use gpucache::PolicyKind;

use crate::{ClientDiscardableManager, ClientHandle, Error, ServiceDiscardableManager};

/// What one run of the frame loop measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameLoopReport {
    /// The policy.
    pub policy: PolicyKind,
    /// Working set in resources (the budget holds 100).
    pub working_set: u32,
    /// Frames measured (after the warm-up frames).
    pub frames: u32,
    /// Re-creations per measured frame.
    pub recreations_per_frame: f64,
    /// Most bytes tracked after any step, over the budget.
    pub peak_over_budget: f64,
}

/// Runs `warmup + frames` frames with a budget of 100 resources of `resource_bytes` and a
/// working set of `percent`% of it; re-creations are counted over the last `frames`.
pub fn run(
    policy: PolicyKind,
    percent: u32,
    warmup: u32,
    frames: u32,
    resource_bytes: u64,
) -> Result<FrameLoopReport, Error> {
    const BUDGET_RESOURCES: u64 = 100;
    let budget = BUDGET_RESOURCES * resource_bytes;
    let n = (BUDGET_RESOURCES as u32 * percent).div_ceil(100);
    let mut service = ServiceDiscardableManager::new(budget, policy);
    let mut client = ClientDiscardableManager::default();
    let cid = 1;
    service.add_client(cid);
    let mut handles: Vec<Option<ClientHandle>> = vec![None; n as usize];
    let mut recreations = 0u64;
    let mut peak = 0u64;
    for frame in 0..warmup + frames {
        for r in 0..n {
            let slot = &mut handles[r as usize];
            let locked = match slot {
                Some(h) => client.lock(h.id)?,
                None => false,
            };
            if !locked {
                if let Some(old) = slot.take() {
                    client.free(old.id)?;
                }
                let h = client.initialize()?;
                for pool in client.take_new_pools() {
                    let mem = client
                        .pool_memory(pool)
                        .ok_or(Error::UnknownPool { client: cid, pool })?;
                    service.register_pool(cid, pool, Arc::clone(mem))?;
                }
                for pool in client.take_released_pools() {
                    service.release_pool(cid, pool)?;
                }
                service.initialize(cid, 0, r, h.pool, h.offset, resource_bytes)?;
                *slot = Some(h);
                if frame >= warmup {
                    recreations += 1;
                }
            }
            // "Use" the resource here; then the unlock, ordered after the use.
            service.unlock(cid, r)?;
            peak = peak.max(service.stats().total_bytes);
        }
    }
    Ok(FrameLoopReport {
        policy,
        working_set: n,
        frames,
        recreations_per_frame: recreations as f64 / f64::from(frames.max(1)),
        peak_over_budget: peak as f64 / budget as f64,
    })
}
