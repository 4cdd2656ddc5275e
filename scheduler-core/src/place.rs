//! Placing one pod set inside one cluster: choose the span (the domain that will hold all its
//! pods), then fill it host by host. The locality strategy looks for the narrowest span that
//! fits, best-fit among equals, and fills so as to use as few sub-domains as it can; the
//! baselines' strategies ignore preferences (never requirements) and fill in their own order.

use crate::capacity::{Capacity, PodShape};
use crate::fleet::{ClusterId, DomainId, FlavorId, Fleet};

/// How a pod set is laid out inside a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fill {
    /// Narrowest span that fits, best-fit; fill whole sub-domains first (Stowage, Kueue TAS).
    #[default]
    Locality,
    /// Span as wide as allowed; hosts in fleet order (a topology-blind first fit).
    FirstFit,
    /// Span as wide as allowed; the most-allocated hosts first (Volcano's binpack).
    BinPack,
}

/// One pod set to place, resolved against a cluster.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub flavor: Option<FlavorId>,
    pub shape: PodShape,
    pub pods: u32,
    /// The widest depth the span may have (0: the whole cluster).
    pub widest_depth: u8,
    /// Groups of `.0` pods that must share a domain at depth `.1`.
    pub slice: Option<(u32, u8)>,
    /// Only inside this domain of the cluster (the batch optimiser's choice); `None`: anywhere.
    pub within: Option<DomainId>,
}

impl Ask {
    /// The domain the pod set's span must lie in.
    fn root(&self, fleet: &Fleet, cluster: ClusterId) -> DomainId {
        self.within.unwrap_or(fleet.cluster(cluster).root)
    }
}

/// Where a pod set went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSetPlacement {
    pub flavor: Option<FlavorId>,
    /// The narrowest domain holding all its pods.
    pub span: DomainId,
    /// Hosts and how many pods each, in placement order.
    pub hosts: Vec<(DomainId, u32)>,
}

pub(crate) struct Placer<'a> {
    pub fleet: &'a Fleet,
    pub cap: &'a mut Capacity,
    pub fill: Fill,
}

/// Read-only questions about capacity, shared by placement and by pending reasons.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub fleet: &'a Fleet,
    pub cap: &'a Capacity,
    pub fill: Fill,
}

impl View<'_> {
    fn slots(&self, d: DomainId, ask: &Ask) -> u32 {
        self.cap.slots(self.fleet, d, ask.flavor, &ask.shape)
    }

    pub(crate) fn fits(&self, d: DomainId, ask: &Ask) -> bool {
        match ask.slice {
            Some((size, depth)) if self.fleet.domain(d).depth < depth => {
                self.slice_count(d, ask, size, depth) >= ask.pods / size
            }
            _ => self.slots(d, ask) >= ask.pods,
        }
    }

    /// Whether the pod set's pods fit the hosts under `d`, counted host by host. Above a host,
    /// [`Self::fits`] is a bound (a domain's free GPUs and its free CPU and memory counted
    /// apart, so a host with a GPU free but no CPU counts for one): good for pruning, not for
    /// choosing the span to fill.
    fn fits_exactly(&self, d: DomainId, ask: &Ask) -> bool {
        if ask.slice.is_some() || self.fleet.domain(d).node.is_some() {
            return self.fits(d, ask);
        }
        let mut found = 0u32;
        let mut stack = vec![d];
        while let Some(e) = stack.pop() {
            let dom = self.fleet.domain(e);
            if dom.node.is_some() {
                found = found.saturating_add(self.slots(e, ask));
                if found >= ask.pods {
                    return true;
                }
            } else if self.slots(e, ask) > 0 {
                stack.extend(dom.children.iter().rev());
            }
        }
        false
    }

    /// How many slices of `size` fit under `d`, each inside one domain at `depth`.
    fn slice_count(&self, d: DomainId, ask: &Ask, size: u32, depth: u8) -> u32 {
        self.domains_at(d, depth, &|p, e| p.slots(e, ask) >= size).into_iter().map(|e| self.slots(e, ask) / size).sum()
    }

    /// Free units left in `d` after placing the pod set there: the best-fit measure.
    pub fn leftover(&self, d: DomainId, ask: &Ask) -> u64 {
        match ask.flavor {
            Some(f) if ask.shape.gpus > 0 => {
                self.cap.free_gpus(self.fleet, d, f).saturating_sub(u64::from(ask.shape.gpus) * u64::from(ask.pods))
            }
            _ => self.cap.free_cpu_milli(d).saturating_sub(ask.shape.cpu_milli * u64::from(ask.pods)),
        }
    }

    /// Domains at `depth` (or hosts, when `depth` is deeper than the tree) under `from`, in id
    /// order, for which `keep` holds, descending only into subtrees where `keep` holds:
    /// capacity only shrinks going down.
    pub(crate) fn domains_at(
        &self,
        from: DomainId,
        depth: u8,
        keep: &dyn Fn(&Self, DomainId) -> bool,
    ) -> Vec<DomainId> {
        let mut out = Vec::new();
        self.visit_at(from, depth, keep, &mut |d| out.push(d));
        out
    }

    /// [`Self::domains_at`], each handed to `visit` in turn rather than collected.
    fn visit_at(
        &self,
        from: DomainId,
        depth: u8,
        keep: &dyn Fn(&Self, DomainId) -> bool,
        visit: &mut dyn FnMut(DomainId),
    ) {
        // Recursion, not a stack of its own: a cluster's tree is at most six deep (its root
        // and the five levels, which `FleetBuilder::cluster` holds to strictly widest first),
        // and a stack was an allocation per search.
        if !keep(self, from) {
            return;
        }
        let dom = self.fleet.domain(from);
        if dom.depth >= depth || dom.children.is_empty() {
            visit(from);
        } else {
            for &child in &dom.children {
                self.visit_at(child, depth, keep, visit);
            }
        }
    }

    /// The domain of least leftover for `ask` among those `domains_at` gives, ties to the
    /// lowest id.
    fn best_fit_at(
        &self,
        from: DomainId,
        depth: u8,
        keep: &dyn Fn(&Self, DomainId) -> bool,
        ask: &Ask,
    ) -> Option<DomainId> {
        // `keep` may be a bound. Most of the time the best by it fits as counted host by host,
        // and one count confirms it; when it does not, the search runs again counting each
        // candidate that would be chosen.
        let search = |confirm: bool| {
            let mut best: Option<(u64, DomainId)> = None;
            self.visit_at(from, depth, keep, &mut |d| {
                let key = (self.leftover(d, ask), d);
                if best.is_none_or(|b| key < b) && (!confirm || self.fits_exactly(d, ask)) {
                    best = Some(key);
                }
            });
            best.map(|(_, d)| d)
        };
        match search(false) {
            Some(d) if !self.fits_exactly(d, ask) => search(true),
            found => found,
        }
    }

    /// The narrowest domain that fits the whole pod set, best fit (least left over) among
    /// those of that depth, ties in tree order.
    pub fn narrowest_span(&self, cluster: ClusterId, ask: &Ask) -> Option<DomainId> {
        let c = self.fleet.cluster(cluster);
        let root = ask.root(self.fleet, cluster);
        if let Some(host) = self.best_fit_host(root, ask) {
            return Some(host);
        }
        let need = u64::from(ask.shape.gpus) * u64::from(ask.pods);
        let widest = ask.widest_depth.max(self.fleet.domain(root).depth);
        for depth in (widest..c.host_depth()).rev() {
            if !c.depth_could_hold(depth, need) {
                continue;
            }
            if let Some(best) = self.best_fit_at(root, depth, &|p, d| p.fits(d, ask), ask) {
                return Some(best);
            }
        }
        None
    }

    /// The host with the fewest free GPUs that still holds the whole pod set: from the root's
    /// histogram, the smallest free count k that is large enough, then down the tree through
    /// domains that have a host with k free. Never scans hosts that cannot be the answer.
    fn best_fit_host(&self, root: DomainId, ask: &Ask) -> Option<DomainId> {
        let (Some(flavor), true) = (ask.flavor, ask.shape.gpus > 0) else {
            return self.best_fit_at(root, u8::MAX, &|p, d| p.slots(d, ask) >= ask.pods, ask);
        };
        let need = (u64::from(ask.shape.gpus) * u64::from(ask.pods)).try_into().unwrap_or(usize::MAX);
        let width = self.cap.histogram(self.fleet, root, flavor).len();
        (need..width).find_map(|k| self.host_with(root, flavor, k, ask))
    }

    /// The first host under `d`, in tree order, with `k` free GPUs of `flavor` that holds the
    /// whole pod set, descending only where the histogram counts such a host. (Recursion, as in
    /// [`Self::visit_at`]: the tree is at most six deep, and a stack was an allocation per k.)
    fn host_with(&self, d: DomainId, flavor: FlavorId, k: usize, ask: &Ask) -> Option<DomainId> {
        if self.cap.histogram(self.fleet, d, flavor).get(k).is_none_or(|&n| n == 0) {
            return None;
        }
        let dom = self.fleet.domain(d);
        if dom.node.is_some() {
            // k free GPUs by the histogram; CPU and memory may still say no.
            return (self.slots(d, ask) >= ask.pods).then_some(d);
        }
        dom.children.iter().find_map(|&c| self.host_with(c, flavor, k, ask))
    }

    fn widest_span(&self, root: DomainId, ask: &Ask) -> Option<DomainId> {
        let fitting = self.domains_at(root, ask.widest_depth, &|p, d| p.fits(d, ask));
        let mut fitting = fitting.into_iter().filter(|&d| self.fits_exactly(d, ask));
        match self.fill {
            Fill::BinPack => fitting.min_by_key(|&d| (self.leftover(d, ask), d)),
            _ => fitting.next(),
        }
    }

    /// The most pods of this pod set that one allowed span of `cluster` could take now.
    pub fn largest(&self, cluster: ClusterId, ask: &Ask) -> u32 {
        self.fleet
            .cluster(cluster)
            .at_depth(ask.widest_depth)
            .iter()
            .map(|&d| match ask.slice {
                Some((size, depth)) if self.fleet.domain(d).depth < depth => {
                    self.slice_count(d, ask, size, depth) * size
                }
                _ => self.slots(d, ask),
            })
            .max()
            .unwrap_or(0)
    }
}

impl Placer<'_> {
    fn view(&self) -> View<'_> {
        View { fleet: self.fleet, cap: self.cap, fill: self.fill }
    }

    fn slots(&self, d: DomainId, ask: &Ask) -> u32 {
        self.view().slots(d, ask)
    }

    fn leftover(&self, d: DomainId, ask: &Ask) -> u64 {
        self.view().leftover(d, ask)
    }

    /// Places the pod set in `cluster`, or leaves capacity untouched and returns `None`.
    pub fn place(&mut self, cluster: ClusterId, ask: &Ask) -> Option<PodSetPlacement> {
        let view = self.view();
        let root = ask.root(self.fleet, cluster);
        if !view.fits(root, ask) {
            return None;
        }
        let span = match self.fill {
            Fill::Locality => view.narrowest_span(cluster, ask)?,
            Fill::FirstFit | Fill::BinPack => view.widest_span(root, ask)?,
        };
        self.place_in(ask, span)
    }

    /// Places the pod set inside `span`, a domain that fits it (for `Locality`, the one
    /// `View::narrowest_span` finds on this capacity), or leaves capacity untouched and
    /// returns `None`.
    pub fn place_in(&mut self, ask: &Ask, span: DomainId) -> Option<PodSetPlacement> {
        let cp = self.cap.checkpoint();
        let mut hosts = Vec::new();
        let placed = match ask.slice {
            Some((size, depth)) if self.fleet.domain(span).depth < depth => {
                self.fill_slices(span, ask, size, depth, &mut hosts)
            }
            _ => self.fill(span, ask.pods, ask, &mut hosts),
        };
        if placed < ask.pods {
            self.cap.rollback(self.fleet, cp);
            return None;
        }
        let span = self.fleet.common_ancestor(hosts.iter().map(|h| h.0))?;
        Some(PodSetPlacement { flavor: ask.flavor, span, hosts })
    }

    fn fill_slices(
        &mut self,
        span: DomainId,
        ask: &Ask,
        size: u32,
        depth: u8,
        hosts: &mut Vec<(DomainId, u32)>,
    ) -> u32 {
        let mut placed = 0;
        let slice_ask = Ask { pods: size, slice: None, ..*ask };
        while placed < ask.pods {
            let candidates = self.view().domains_at(span, depth, &|p, e| p.slots(e, ask) >= size);
            let Some(best) = candidates.into_iter().min_by_key(|&e| (self.leftover(e, &slice_ask), e)) else {
                break;
            };
            if self.fill(best, size, ask, hosts) < size {
                break;
            }
            placed += size;
        }
        placed
    }

    /// Places up to `n` pods under `d`; returns how many it placed.
    fn fill(&mut self, d: DomainId, n: u32, ask: &Ask, hosts: &mut Vec<(DomainId, u32)>) -> u32 {
        match self.fill {
            Fill::Locality => self.fill_locality(d, n, ask, hosts),
            Fill::FirstFit | Fill::BinPack => {
                let mut candidates = self.view().domains_at(d, u8::MAX, &|p, e| p.slots(e, ask) > 0);
                if self.fill == Fill::BinPack {
                    candidates.sort_by_key(|&h| (self.leftover(h, ask), h));
                }
                let mut remaining = n;
                for h in candidates {
                    if remaining == 0 {
                        break;
                    }
                    remaining -= self.take(h, remaining, ask, hosts);
                }
                n - remaining
            }
        }
    }

    fn take(&mut self, host: DomainId, n: u32, ask: &Ask, hosts: &mut Vec<(DomainId, u32)>) -> u32 {
        let m = n.min(self.slots(host, ask));
        if m > 0 {
            self.cap.take(self.fleet, host, m, ask.shape);
            hosts.push((host, m));
        }
        m
    }

    fn fill_locality(&mut self, d: DomainId, n: u32, ask: &Ask, hosts: &mut Vec<(DomainId, u32)>) -> u32 {
        if self.fleet.domain(d).node.is_some() {
            return self.take(d, n, ask, hosts);
        }
        let mut remaining = n;
        let mut exhausted: Vec<DomainId> = Vec::new();
        while remaining > 0 {
            let children: Vec<(DomainId, u32)> = self
                .fleet
                .domain(d)
                .children
                .iter()
                .filter(|c| !exhausted.contains(c))
                .map(|&c| (c, self.slots(c, ask)))
                .filter(|&(_, s)| s > 0)
                .collect();
            // A child that holds all the rest, best-fit; otherwise the roomiest child, so the
            // pod set touches as few sub-domains as it can.
            let whole = children
                .iter()
                .filter(|&&(_, s)| s >= remaining)
                .min_by_key(|&&(c, _)| (self.leftover(c, &Ask { pods: remaining, ..*ask }), c));
            let (child, want) = match whole {
                Some(&(c, _)) => (c, remaining),
                None => match children.iter().max_by_key(|&&(c, s)| (s, std::cmp::Reverse(c))) {
                    Some(&(c, s)) => (c, s),
                    None => break,
                },
            };
            let got = self.fill_locality(child, want, ask, hosts);
            if got < want {
                exhausted.push(child);
            }
            remaining -= got;
        }
        n - remaining
    }
}
