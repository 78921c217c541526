//! A fixed-capacity ring whose allocation never exceeds its capacity (unlike `VecDeque`, which
//! may round up), so the store's memory bound is exact.

/// Ring buffer of `Copy` items, oldest first.
#[derive(Debug, Clone)]
pub(crate) struct Ring<T: Copy> {
    buf: Vec<T>,
    head: usize,
    cap: usize,
}

impl<T: Copy> Ring<T> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            head: 0,
            cap: cap.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.buf.len() == self.cap
    }

    pub(crate) fn allocated_items(&self) -> usize {
        self.buf.capacity()
    }

    /// Appends; when full, overwrites and returns the oldest item.
    pub(crate) fn push(&mut self, item: T) -> Option<T> {
        if self.buf.len() < self.cap {
            if self.buf.len() == self.buf.capacity() {
                let grow = self.buf.capacity().max(4).min(self.cap - self.buf.len());
                self.buf.reserve_exact(grow);
            }
            self.buf.push(item);
            return None;
        }
        let old = std::mem::replace(&mut self.buf[self.head], item);
        self.head = (self.head + 1) % self.cap;
        Some(old)
    }

    /// Removes the oldest items while `keep_going` says so, appending them to `out`.
    pub(crate) fn drain_front_while(&mut self, mut keep_going: impl FnMut(&T) -> bool, out: &mut Vec<T>) {
        if self.head != 0 {
            self.buf.rotate_left(self.head);
            self.head = 0;
        }
        let n = self.buf.iter().take_while(|item| keep_going(item)).count();
        out.extend(self.buf.drain(..n));
    }

    pub(crate) fn front(&self) -> Option<&T> {
        if self.buf.is_empty() {
            None
        } else {
            self.buf.get(self.head)
        }
    }

    pub(crate) fn back(&self) -> Option<&T> {
        if self.buf.is_empty() {
            return None;
        }
        let idx = (self.head + self.buf.len() - 1) % self.buf.len();
        self.buf.get(idx)
    }

    /// Oldest to newest.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        let (a, b) = self.buf.split_at(self.head.min(self.buf.len()));
        b.iter().chain(a.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_pops_in_order() {
        let mut r = Ring::new(3);
        assert_eq!(r.push(1), None);
        r.push(2);
        r.push(3);
        assert_eq!(r.push(4), Some(1));
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(r.front(), Some(&2));
        assert_eq!(r.back(), Some(&4));
        let mut out = Vec::new();
        r.drain_front_while(|x| *x < 3, &mut out);
        assert_eq!(out, vec![2]);
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), vec![3, 4]);
        r.push(5);
        r.push(6);
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), vec![4, 5, 6]);
        assert!(r.allocated_items() <= 3);
    }
}
