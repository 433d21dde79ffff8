//! How far a pass has gone, and whether it should stop: cells that another thread reads and
//! writes while the pass runs. In the page's threaded build they lie in the wasm memory the page
//! shares with the engine's worker, so the page reads the layer a long pass is on, draws the heads
//! of each layer it has finished (after a WebGPU pass, each layer whose heads the summary has
//! computed again), and asks it to stop, though the worker is busy with the pass (src/wasm.rs
//! `Session.progressCells`).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::analysis::thumbnail::{HeadFold, THUMB};
use crate::error::{Error, Result};

/// The cells, in this order in memory (`u32` each in wasm32): the layers the pass has begun, its
/// layers, a stop request (not 0: stop), then what [`PassProgress::folded`] shows: the layers
/// whose heads' thumbnails it holds, their side, the heads a layer, and where the thumbnails lie
/// (a byte address; 0: nowhere).
#[repr(C)]
#[derive(Debug, Default)]
pub struct PassProgress {
    begun: AtomicU32,
    layers: AtomicU32,
    stop: AtomicU32,
    folded: AtomicU32,
    side: AtomicU32,
    heads: AtomicU32,
    thumbs_at: AtomicUsize,
    /// The thumbnails, `(layers, heads, side, side)`: made once, big enough for the session's
    /// model ([`PassProgress::make_room`]), so that they lie where the page was told before the
    /// pass grows the memory.
    thumbs: Mutex<Vec<f32>>,
}

impl PassProgress {
    /// A pass of `layers` layers begins: none begun, none folded, no stop asked.
    pub fn start(&self, layers: usize) {
        self.begun.store(0, Ordering::Relaxed);
        self.layers.store(layers as u32, Ordering::Relaxed);
        self.folded.store(0, Ordering::Relaxed);
        self.stop.store(0, Ordering::Release);
    }

    /// Room for the thumbnails of `layers` layers of `heads` heads each, at most [`THUMB`]
    /// cells a side, made where there is less (a long pass folds each head's thumbnail as it
    /// computes it: [`PassProgress::folded`] shows each layer's as it ends).
    pub fn make_room(&self, layers: usize, heads: usize) {
        let mut thumbs = self.thumbs.lock().unwrap_or_else(|e| e.into_inner());
        let n = layers * heads * THUMB * THUMB;
        if thumbs.len() < n {
            *thumbs = vec![0f32; n];
        }
        self.thumbs_at
            .store(thumbs.as_ptr() as usize, Ordering::Release);
    }

    /// The pass has folded every head of layer `layer` (its first item's, `heads`, each over
    /// the whole text): their own thumbnails are shown ([`PassProgress::folded_heads`]). A pass
    /// over the queries and keys alone (a long text's) folds them; others show none.
    pub(crate) fn folded(&self, layer: usize, heads: &[HeadFold]) {
        if let Some(side) = heads.first().map(|f| f.bins().side) {
            let thumbs = heads.iter().map(HeadFold::own_values);
            self.folded_heads(layer, 0, heads.len(), side, thumbs);
        }
    }

    /// Heads `first..` of layer `layer` (its first item's, of `of` a layer), each its own
    /// thumbnail of `side × side`, folded: by a long pass on the CPU engine as it ends the layer
    /// ([`PassProgress::folded`]), or by the summary after a WebGPU pass, which computes each
    /// head again from the queries and keys a few at a time. They go where the cells say, and
    /// the layer counts as folded once its last head is in, where the layers before it are (both
    /// fold them in order) and there is room; a layer's later heads must have its first's side.
    pub fn folded_heads<'a>(
        &self,
        layer: usize,
        first: usize,
        of: usize,
        side: usize,
        thumbs: impl Iterator<Item = &'a [f32]>,
    ) {
        let thumbs: Vec<&[f32]> = thumbs.collect();
        let (n, count) = (side * side, thumbs.len());
        let mut room = self.thumbs.lock().unwrap_or_else(|e| e.into_inner());
        let at = (layer * of + first) * n;
        let same = first == 0
            || (self.side.load(Ordering::Relaxed) as usize == side
                && self.heads.load(Ordering::Relaxed) as usize == of);
        if self.folded.load(Ordering::Relaxed) as usize != layer
            || !same
            || count == 0
            || first + count > of
            || room.len() < at + count * n
            || thumbs.iter().any(|v| v.len() != n)
        {
            return;
        }
        for (to, values) in room[at..].chunks_exact_mut(n).zip(thumbs) {
            to.copy_from_slice(values);
        }
        self.side.store(side as u32, Ordering::Relaxed);
        self.heads.store(of as u32, Ordering::Relaxed);
        if first + count == of {
            self.folded.store(layer as u32 + 1, Ordering::Release);
        }
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
        self.mark_begun(layer);
        Ok(())
    }

    /// Layer `layer` (0-based) counts as begun, no stop read: a WebGPU pass tells it as the GPU
    /// finishes the work before it (the pass reads a stop itself, as it submits the next layers).
    pub(crate) fn mark_begun(&self, layer: usize) {
        self.begun.fetch_max(layer as u32 + 1, Ordering::Relaxed);
    }

    /// The layers begun and the pass's layers.
    pub fn at(&self) -> (usize, usize) {
        (
            self.begun.load(Ordering::Relaxed) as usize,
            self.layers.load(Ordering::Relaxed) as usize,
        )
    }

    /// Where the cells begin in memory (the page's view of them: six `u32`, then the
    /// thumbnails' address, a `usize`).
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

    /// The cells reported to, if any.
    pub(crate) fn cells(&self) -> Option<&Arc<PassProgress>> {
        self.0.as_ref()
    }

    /// Self-attention layer `layer` of the pass has folded `heads` whole
    /// ([`PassProgress::folded`]).
    pub(crate) fn folded(&self, layer: usize, heads: &[HeadFold]) {
        if let Some(p) = &self.0 {
            p.folded(layer, heads);
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

    /// The cells and thumbnails as the page reads them: six `u32`, the thumbnails' address,
    /// then `(layers, heads, side, side)` values from it.
    fn shown(p: &PassProgress) -> ([u32; 6], Vec<f32>) {
        // SAFETY: `cells()` is the `repr(C)` struct's start: six `AtomicU32` then an
        // `AtomicUsize` (offset 24, aligned), and the address it holds is the thumbnails' own
        let (cells, at) = unsafe {
            let c = p.cells();
            let six: [u32; 6] = std::slice::from_raw_parts(c, 6).try_into().unwrap();
            (six, *(c.add(6) as *const usize))
        };
        let n = (cells[3] * cells[4] * cells[4] * cells[5]) as usize;
        if n == 0 {
            return (cells, vec![]);
        }
        // SAFETY: the pass wrote `n` values there (the folded layers' heads), in room made for more
        let values = unsafe { std::slice::from_raw_parts(at as *const f32, n) }.to_vec();
        (cells, values)
    }

    #[test]
    fn each_layer_folded_shows_its_heads_thumbnails_in_order_where_the_cells_say() {
        use crate::analysis::thumbnail::Bins;
        let p = Arc::new(PassProgress::default());
        p.make_room(3, 2);
        p.start(3);
        let progress = Progress::to(&p);
        // two heads over 5 positions (one bin a position): head j's row q puts (q + j + 1) / 10
        // on key q
        let t = 5;
        let layer = |scale: f32| -> Vec<HeadFold> {
            (0..2)
                .map(|j| {
                    let mut f = HeadFold::new(Bins::of(t), t);
                    for q in 0..t {
                        let mut row = vec![0f32; t];
                        row[q] = scale * (q + j + 1) as f32 / 10.0;
                        f.row(q, 0, &row);
                    }
                    f
                })
                .collect()
        };
        assert_eq!(shown(&p).0, [0, 3, 0, 0, 0, 0], "nothing folded yet");
        let (first, second) = (layer(1.0), layer(0.5));
        progress.folded(1, &second);
        assert_eq!(
            shown(&p).0[3],
            0,
            "a layer after one not yet folded is not shown"
        );
        progress.folded(0, &first);
        progress.folded(1, &second);
        let (cells, values) = shown(&p);
        assert_eq!(
            cells,
            [0, 3, 0, 2, 5, 2],
            "two layers of two heads of 5 × 5 cells"
        );
        let want: Vec<f32> = [&first, &second]
            .iter()
            .flat_map(|l| l.iter().flat_map(|f| f.thumbnails().own.values))
            .collect();
        assert_eq!(values, want, "each layer's heads' own thumbnails, in order");
        assert_eq!(values[6], 0.2, "layer 0, head 0, row 1's diagonal");
        p.start(3);
        assert_eq!(shown(&p).0[3], 0, "a new pass shows none of the last one's");
        // no room made (the CLI's, a native pass): nothing is shown
        let bare = Arc::new(PassProgress::default());
        bare.start(3);
        Progress::to(&bare).folded(0, &first);
        assert_eq!(shown(&bare).0[3], 0);
    }

    #[test]
    fn a_layer_folded_a_few_heads_at_a_time_shows_when_its_last_head_is_in() {
        // a WebGPU pass's summary: three heads a layer, of 2 × 2 cells, two heads a call
        let p = PassProgress::default();
        p.make_room(2, 3);
        p.start(2);
        let head = |layer: usize, h: usize| -> Vec<f32> {
            (0..4).map(|i| (layer * 100 + h * 10 + i) as f32).collect()
        };
        let thumbs = |layer: usize, heads: std::ops::Range<usize>| {
            heads.map(|h| head(layer, h)).collect::<Vec<_>>()
        };
        let fold = |layer: usize, heads: std::ops::Range<usize>| {
            let first = heads.start;
            let t = thumbs(layer, heads);
            p.folded_heads(layer, first, 3, 2, t.iter().map(Vec::as_slice));
        };
        fold(0, 0..2);
        assert_eq!(shown(&p).0[3], 0, "a layer shows once its last head is in");
        fold(1, 0..2);
        fold(0, 2..3);
        assert_eq!(
            shown(&p).0[3],
            1,
            "a later layer's heads, folded before this one's last, are not kept"
        );
        fold(1, 0..2);
        fold(1, 2..3);
        let (cells, values) = shown(&p);
        assert_eq!(
            cells,
            [0, 2, 0, 2, 2, 3],
            "two layers of three heads of 2 × 2 cells"
        );
        let want: Vec<f32> = (0..2)
            .flat_map(|l| (0..3).flat_map(move |h| head(l, h)))
            .collect();
        assert_eq!(values, want, "each head where the page reads it");
        p.start(2);
        fold(0, 0..2);
        let other: Vec<f32> = vec![7.0; 9];
        p.folded_heads(0, 2, 3, 3, std::iter::once(other.as_slice()));
        assert_eq!(
            shown(&p).0[3],
            0,
            "a head of another side than its layer's first is not shown"
        );
    }
}
