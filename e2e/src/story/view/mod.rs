//! The two ways the story is shown: a live terminal view ([`tui`]) and one line per step for
//! logs and pipes ([`lines`]). Both read only the [`super::StoryState`].

pub mod lines;
pub mod tui;
