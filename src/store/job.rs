//! The one shape of store work: a [`Job`] of entries, each served by one
//! node, answered entry by entry in one [`Done`].
//!
//! Every kind of work the service sends a store is a kind of job: a
//! request's limits ([`Work`], answered by a [`Reply`]), the RLQS demand
//! boards' steps ([`BoardWork`], answered by a [`BoardReply`]) and the
//! per-tenant overrides' book ([`BookWork`], answered by a [`BookReply`]). What the
//! layers between the engine and a store need of a job is the same for
//! every kind, and is the [`Entries`] trait: how many entries, each
//! entry's node, the same job over some positions only, and the failed or
//! merged answer. So each layer writes its rule once, generic over the job
//! (the breaker, the deadline), and a layer that serves one kind alone (the
//! failure policies, the leases) passes every other kind through untouched.
//!
//! A new feature adds a kind of job here (a variant of [`Job`] and
//! [`Done`], and an [`Entries`] implementation), or options kept in its own
//! layer; never a second operation on [`super::Store`].

use super::board::{BoardReply, BoardWork};
use super::overrides::{BookReply, BookWork};
use super::{NodeId, Reply, StoreError, StoreErrorKind, Work};

/// One call's work on a store, borrowed from whoever built it.
#[derive(Debug, Clone, Copy)]
pub enum Job<'a> {
    /// A request's limits, under one policy.
    Limits(&'a Work),
    /// Steps on the RLQS demand boards.
    Boards(&'a BoardWork),
    /// Steps on the per-tenant overrides' book.
    Overrides(&'a BookWork),
}

/// A job's answer: one result per entry, in the job's order.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    /// The answer to [`Job::Limits`].
    Limits(Reply),
    /// The answer to [`Job::Boards`].
    Boards(BoardReply),
    /// The answer to [`Job::Overrides`].
    Overrides(BookReply),
}

/// A job a layer built from another (some of its positions): owned, and
/// lent out as a [`Job`].
#[derive(Debug, Clone)]
pub enum OwnedJob {
    /// See [`Job::Limits`].
    Limits(Work),
    /// See [`Job::Boards`].
    Boards(BoardWork),
    /// See [`Job::Overrides`].
    Overrides(BookWork),
}

impl OwnedJob {
    /// The job, borrowed.
    pub fn job(&self) -> Job<'_> {
        match self {
            OwnedJob::Limits(w) => Job::Limits(w),
            OwnedJob::Boards(w) => Job::Boards(w),
            OwnedJob::Overrides(w) => Job::Overrides(w),
        }
    }
}

/// What every kind of job is to the layers: entries that name their node,
/// that can be split by position, and whose answers are per entry.
pub trait Entries: Sized {
    /// The answer to one entry when the store decided it.
    type Answer: 'static;
    /// The answer to the whole job.
    type Reply;

    /// How many entries.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The node that serves entry `position` (`None`: nothing to fail).
    fn node(&self, position: usize) -> Option<&NodeId>;

    /// The same job over the entries at `positions` only, in that order.
    fn select(&self, positions: &[usize]) -> Self;

    /// Each entry's result in `reply`, in the job's order.
    fn results(reply: &Self::Reply) -> &[Result<Self::Answer, StoreError>];

    /// Every entry failed with `error`.
    fn failed(&self, error: &StoreError) -> Self::Reply;

    /// The answer of a job none of whose entries was sent (every one was
    /// refused before the store): no entry answered, nothing undone.
    fn none_sent() -> Self::Reply;

    /// `refused`'s errors in their places, and `sent`'s answers in order
    /// in the others (`sent` is the reply of the job over the positions
    /// `refused` leaves empty).
    fn merged(refused: Vec<Option<StoreError>>, sent: Self::Reply) -> Self::Reply;
}

/// The error of an entry a store left unanswered.
fn unanswered() -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        "a store answered fewer entries than it was sent",
    )
}

/// `refused` and `answered` merged as [`Entries::merged`] says.
fn merge<T>(
    refused: Vec<Option<StoreError>>,
    answered: Vec<Result<T, StoreError>>,
) -> Vec<Result<T, StoreError>> {
    let mut answered = answered.into_iter();
    refused
        .into_iter()
        .map(|r| match r {
            Some(e) => Err(e),
            None => answered.next().unwrap_or_else(|| Err(unanswered())),
        })
        .collect()
}

impl Entries for Work {
    type Answer = super::Answer;
    type Reply = Reply;

    fn len(&self) -> usize {
        self.items.len()
    }

    fn node(&self, position: usize) -> Option<&NodeId> {
        self.items.get(position)?.node.as_ref()
    }

    fn select(&self, positions: &[usize]) -> Work {
        Work::select(self, positions)
    }

    fn results(reply: &Reply) -> &[Result<super::Answer, StoreError>] {
        &reply.answers
    }

    fn failed(&self, error: &StoreError) -> Reply {
        Reply::failed(self.items.len(), error)
    }

    /// Nothing sent commits what was sent: nothing.
    fn none_sent() -> Reply {
        Reply {
            answers: Vec::new(),
            committed: true,
        }
    }

    /// What was sent is committed as the store decided it; the refused
    /// items are failures, for their policies to answer.
    fn merged(refused: Vec<Option<StoreError>>, sent: Reply) -> Reply {
        Reply {
            answers: merge(refused, sent.answers),
            committed: sent.committed,
        }
    }
}

impl Entries for BoardWork {
    type Answer = super::board::Assignments;
    type Reply = BoardReply;

    fn len(&self) -> usize {
        self.steps.len()
    }

    fn node(&self, position: usize) -> Option<&NodeId> {
        self.steps.get(position)?.node.as_ref()
    }

    fn select(&self, positions: &[usize]) -> BoardWork {
        BoardWork {
            instance: self.instance.clone(),
            ttl: self.ttl,
            steps: positions
                .iter()
                .filter_map(|&i| self.steps.get(i).cloned())
                .collect(),
        }
    }

    fn results(reply: &BoardReply) -> &[Result<super::board::Assignments, StoreError>] {
        reply
    }

    fn failed(&self, error: &StoreError) -> BoardReply {
        vec![Err(error.clone()); self.steps.len()]
    }

    fn none_sent() -> BoardReply {
        Vec::new()
    }

    fn merged(refused: Vec<Option<StoreError>>, sent: BoardReply) -> BoardReply {
        merge(refused, sent)
    }
}

impl Entries for BookWork {
    type Answer = super::overrides::BookAnswer;
    type Reply = BookReply;

    fn len(&self) -> usize {
        self.steps.len()
    }

    fn node(&self, position: usize) -> Option<&NodeId> {
        self.steps.get(position)?;
        self.node.as_ref()
    }

    fn select(&self, positions: &[usize]) -> BookWork {
        BookWork {
            keys: self.keys.clone(),
            node: self.node.clone(),
            steps: positions
                .iter()
                .filter_map(|&i| self.steps.get(i).cloned())
                .collect(),
        }
    }

    fn results(reply: &BookReply) -> &[Result<super::overrides::BookAnswer, StoreError>] {
        reply
    }

    fn failed(&self, error: &StoreError) -> BookReply {
        vec![Err(error.clone()); self.steps.len()]
    }

    fn none_sent() -> BookReply {
        Vec::new()
    }

    fn merged(refused: Vec<Option<StoreError>>, sent: BookReply) -> BookReply {
        merge(refused, sent)
    }
}

impl Job<'_> {
    /// Each entry's node, in order.
    pub fn nodes(&self) -> Vec<Option<NodeId>> {
        fn of<J: Entries>(job: &J) -> Vec<Option<NodeId>> {
            (0..job.len()).map(|i| job.node(i).cloned()).collect()
        }
        match self {
            Job::Limits(w) => of(*w),
            Job::Boards(w) => of(*w),
            Job::Overrides(w) => of(*w),
        }
    }

    /// The same job over the entries at `positions` only.
    pub fn select(&self, positions: &[usize]) -> OwnedJob {
        match self {
            Job::Limits(w) => OwnedJob::Limits(Entries::select(*w, positions)),
            Job::Boards(w) => OwnedJob::Boards(Entries::select(*w, positions)),
            Job::Overrides(w) => OwnedJob::Overrides(Entries::select(*w, positions)),
        }
    }

    /// Every entry failed with `error`.
    pub fn failed(&self, error: &StoreError) -> Done {
        match self {
            Job::Limits(w) => Done::Limits(Entries::failed(*w, error)),
            Job::Boards(w) => Done::Boards(Entries::failed(*w, error)),
            Job::Overrides(w) => Done::Overrides(Entries::failed(*w, error)),
        }
    }

    /// The answer when none of its entries was sent.
    pub fn none_sent(&self) -> Done {
        match self {
            Job::Limits(_) => Done::Limits(Work::none_sent()),
            Job::Boards(_) => Done::Boards(BoardWork::none_sent()),
            Job::Overrides(_) => Done::Overrides(BookWork::none_sent()),
        }
    }
}

impl Done {
    /// Entry `position`'s error, if it failed.
    pub fn error(&self, position: usize) -> Option<&StoreError> {
        fn of<J: Entries>(reply: &J::Reply, position: usize) -> Option<&StoreError> {
            J::results(reply).get(position)?.as_ref().err()
        }
        match self {
            Done::Limits(r) => of::<Work>(r, position),
            Done::Boards(r) => of::<BoardWork>(r, position),
            Done::Overrides(r) => of::<BookWork>(r, position),
        }
    }

    /// How many entries it answers.
    pub fn len(&self) -> usize {
        match self {
            Done::Limits(r) => r.answers.len(),
            Done::Boards(r) => r.len(),
            Done::Overrides(r) => r.len(),
        }
    }

    /// Whether it answers none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `refused`'s errors in their places and this answer's in the others
    /// (see [`Entries::merged`]).
    pub fn merged(self, refused: Vec<Option<StoreError>>) -> Done {
        match self {
            Done::Limits(r) => Done::Limits(Work::merged(refused, r)),
            Done::Boards(r) => Done::Boards(BoardWork::merged(refused, r)),
            Done::Overrides(r) => Done::Overrides(BookWork::merged(refused, r)),
        }
    }

    /// The answer to `work`: a store that answered another kind of job
    /// fails every item (never a panic).
    pub fn into_reply(self, work: &Work) -> Reply {
        match self {
            Done::Limits(r) => r,
            _ => work.failed(&mismatch()),
        }
    }

    /// The answer to `work`, likewise.
    pub fn into_board_reply(self, work: &BoardWork) -> BoardReply {
        match self {
            Done::Boards(r) => r,
            _ => Entries::failed(work, &mismatch()),
        }
    }

    /// The answer to `work`, likewise.
    pub fn into_book_reply(self, work: &BookWork) -> BookReply {
        match self {
            Done::Overrides(r) => r,
            _ => Entries::failed(work, &mismatch()),
        }
    }
}

fn mismatch() -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        "a store answered another kind of job than it was sent",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::testing::{board_work_on, work_on};

    fn unavailable() -> StoreError {
        StoreError::new(StoreErrorKind::Unavailable, "down")
    }

    #[test]
    fn a_job_names_each_entrys_node_whatever_its_kind() {
        let work = work_on("a", 5);
        let board = board_work_on("b");
        assert_eq!(Job::Limits(&work).nodes(), vec![Some(NodeId::new("a"))]);
        assert_eq!(Job::Boards(&board).nodes(), vec![Some(NodeId::new("b"))]);
    }

    #[test]
    fn refusals_merge_into_their_places_and_the_sent_answers_fill_the_rest() {
        let mut work = work_on("a", 5);
        work.items.push(work.items[0].clone());
        work.items.push(work.items[0].clone());
        let sent = Work::failed(&work.select(&[0, 2]), &unavailable());
        let refused = vec![
            None,
            Some(StoreError::new(StoreErrorKind::CircuitOpen, "open")),
            None,
        ];
        let merged = Done::Limits(sent).merged(refused);
        let kinds: Vec<_> = (0..3).map(|i| merged.error(i).map(|e| e.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                Some(StoreErrorKind::Unavailable),
                Some(StoreErrorKind::CircuitOpen),
                Some(StoreErrorKind::Unavailable)
            ]
        );
    }

    #[test]
    fn an_entry_a_store_left_unanswered_is_an_error_not_a_panic() {
        let merged = Done::Boards(Vec::new()).merged(vec![None, None]);
        assert_eq!(merged.len(), 2);
        assert!(merged.error(1).is_some());
    }

    #[test]
    fn an_answer_of_another_kind_fails_every_entry() {
        let work = work_on("a", 5);
        let reply = Done::Boards(Vec::new()).into_reply(&work);
        assert_eq!(reply.answers.len(), 1);
        assert!(!reply.committed);
        let board = board_work_on("b");
        let reply = Done::Limits(Work::none_sent()).into_board_reply(&board);
        assert!(reply[0].is_err());
    }

    #[test]
    fn selecting_board_steps_keeps_the_instance_and_ttl() {
        let mut board = board_work_on("b");
        board.steps.push(board.steps[0].clone());
        board.steps[1].key = "c".into();
        let some = Entries::select(&board, &[1]);
        assert_eq!((some.instance.as_ref(), some.ttl), ("i", board.ttl));
        assert_eq!(some.steps.len(), 1);
        assert_eq!(some.steps[0].key, "c");
    }
}
