//! How far a pass has gone, and whether it should stop: three cells that another thread reads
//! and writes while the pass runs. In the page's threaded build they lie in the wasm memory the
//! page shares with the engine's worker, so the page reads the layer a long pass is on and asks it
//! to stop, though the worker is busy with the pass (src/wasm.rs `Session.progressCells`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// The cells, in this order in memory (`u32` each): the layers the pass has begun, its layers, and
/// a stop request (not 0: stop).
#[repr(C)]
#[derive(Debug, Default)]
pub struct PassProgress {
    begun: AtomicU32,
    layers: AtomicU32,
    stop: AtomicU32,
}

impl PassProgress {
    /// A pass of `layers` layers begins: none begun, no stop asked.
    pub fn start(&self, layers: usize) {
        self.begun.store(0, Ordering::Relaxed);
        self.layers.store(layers as u32, Ordering::Relaxed);
        self.stop.store(0, Ordering::Release);
    }

    /// Asks the pass to stop before its next layer.
    pub fn ask_to_stop(&self) {
        self.stop.store(1, Ordering::Release);
    }

    /// Whether a stop was asked since the pass began.
    pub fn stop_asked(&self) -> bool {
        self.stop.load(Ordering::Acquire) != 0
    }

    /// Layer `layer` (0-based) begins: [`Error::Stopped`] where a stop was asked.
    pub(crate) fn begin(&self, layer: usize) -> Result<()> {
        let layers = self.layers.load(Ordering::Relaxed) as usize;
        if self.stop_asked() {
            return Err(Error::Stopped { layer, layers });
        }
        self.begun.fetch_max(layer as u32 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// The layers begun and the pass's layers.
    pub fn at(&self) -> (usize, usize) {
        (
            self.begun.load(Ordering::Relaxed) as usize,
            self.layers.load(Ordering::Relaxed) as usize,
        )
    }

    /// Where the cells begin in memory (the page's view of them: three `u32`).
    pub fn cells(&self) -> *const u32 {
        (self as *const Self).cast()
    }
}

/// Where a pass reports its layers, if anywhere ([`crate::engine::TraceOptions::progress`]). It
/// changes nothing a pass computes: two options that differ in it alone are equal.
#[derive(Debug, Clone, Default)]
pub struct Progress(Option<Arc<PassProgress>>);

impl Progress {
    /// Reports to `cells`.
    pub fn to(cells: &Arc<PassProgress>) -> Self {
        Self(Some(cells.clone()))
    }

    /// Self-attention layer `layer` of the pass begins: [`Error::Stopped`] where a stop was asked.
    pub(crate) fn begin(&self, layer: usize) -> Result<()> {
        match &self.0 {
            Some(p) => p.begin(layer),
            None => Ok(()),
        }
    }
}

impl PartialEq for Progress {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Progress {}

impl std::hash::Hash for Progress {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_asked_stops_the_next_layer_and_names_it() {
        let p = Arc::new(PassProgress::default());
        p.start(6);
        let progress = Progress::to(&p);
        progress.begin(0).unwrap();
        progress.begin(1).unwrap();
        assert_eq!(p.at(), (2, 6));
        p.ask_to_stop();
        let err = progress.begin(2).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Stopped {
                    layer: 2,
                    layers: 6
                }
            ),
            "{err}"
        );
        assert_eq!(p.at(), (2, 6), "a stopped layer is not begun");
        p.start(6);
        progress.begin(0).unwrap();
        assert_eq!(p.at(), (1, 6), "a new pass begins again");
        // the cells as the page reads them: three u32 from `cells()`
        let cells = unsafe { std::slice::from_raw_parts(p.cells(), 3) };
        assert_eq!(cells, [1, 6, 0]);
    }
}
