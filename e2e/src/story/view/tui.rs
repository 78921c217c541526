//! The live terminal view: a table per node (LS usage, BE usage, batch-cpu/memory, BE quota or
//! cpuset, LS burst, evictions), sparklines of the recent history, and the event log.
//! [`draw`] is a pure function of the state, so a test renders it into ratatui's
//! `TestBackend`; [`Tui`] puts it on the real terminal (alternate screen, raw mode) and
//! restores the terminal on drop, also on an error.

use std::io::Stdout;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ratatui::Frame;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table};
use tokio_util::sync::CancellationToken;

use super::super::state::{NodeTrack, cores, gib, quota};
use super::super::{StoryError, StoryState, View};
use super::lines::format_line;

/// Column titles of the node table.
pub const COLUMNS: [&str; 9] = [
    "node",
    "LS cpu",
    "BE cpu",
    "batch-cpu",
    "batch-mem GiB",
    "BE quota",
    "BE cpuset",
    "LS burst ms",
    "evictions",
];

fn node_row(track: &NodeTrack) -> Row<'static> {
    let s = track.latest().cloned().unwrap_or_default();
    let opt_cores = |v: Option<u64>| v.map_or("-".into(), |v| cores(v as i64));
    Row::new(vec![
        Cell::from(track.name.clone()),
        Cell::from(opt_cores(s.ls_cpu_milli)),
        Cell::from(opt_cores(s.be_cpu_milli)),
        Cell::from(s.batch_cpu_milli.map_or("-".into(), cores)),
        Cell::from(s.batch_memory_bytes.map_or("-".into(), gib)),
        Cell::from(s.be_quota_us.map_or("-".into(), quota)),
        Cell::from(s.be_cpuset.unwrap_or_else(|| "-".into())),
        Cell::from(
            s.ls_burst_us
                .map_or("-".into(), |b| format!("{:.0}", b as f64 / 1000.0)),
        ),
        Cell::from(track.evictions.to_string()),
    ])
}

fn series(track: &NodeTrack, field: fn(&super::super::observe::NodeSample) -> Option<u64>) -> Vec<u64> {
    track
        .history
        .iter()
        .map(|m| field(&m.sample).unwrap_or(0))
        .collect()
}

fn sparklines(frame: &mut Frame<'_>, area: Rect, track: &NodeTrack) {
    let parts = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Ratio(1, 3); 3])
        .split(area);
    let charts: [(&str, Vec<u64>, Color); 3] = [
        ("LS cpu", series(track, |s| s.ls_cpu_milli), Color::Red),
        ("BE cpu", series(track, |s| s.be_cpu_milli), Color::Blue),
        (
            "batch-cpu",
            series(track, |s| s.batch_cpu_milli.and_then(|v| u64::try_from(v).ok())),
            Color::Green,
        ),
    ];
    for ((title, data, color), part) in charts.into_iter().zip(parts.iter()) {
        // The newest samples that fit, right-aligned like a scrolling chart.
        let width = usize::from(part.width.saturating_sub(2));
        let data = &data[data.len().saturating_sub(width)..];
        let chart = Sparkline::default()
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(format!("{} {title}", track.name)),
            )
            .data(data)
            .style(Style::default().fg(color));
        frame.render_widget(chart, *part);
    }
}

/// Draws the whole view for `state`.
pub fn draw(frame: &mut Frame<'_>, state: &StoryState) {
    let nodes = state.nodes.len() as u16;
    let chunks = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(3),
            Constraint::Length(nodes + 3),
            Constraint::Length(nodes * 4),
            Constraint::Min(4),
        ])
        .split(frame.area());
    let progress = match (state.played, state.act) {
        (Some(played), Some(act)) => format!(
            "{} — {:.0}s of {}s",
            act.label(),
            played.as_secs_f64(),
            state.duration.as_secs()
        ),
        _ if state.finished => "finished".to_string(),
        _ => format!("setting up — {:.0}s", state.elapsed.as_secs_f64()),
    };
    let header = Paragraph::new(vec![
        Line::from(format!(
            "koord-playground story: {progress}    (Ctrl-C or q to stop)"
        )),
        Line::from(state.cgroups.clone()),
    ])
    .block(Block::default().borders(Borders::BOTTOM));
    frame.render_widget(header, chunks[0]);

    let header_row =
        Row::new(COLUMNS.iter().map(|c| Cell::from(*c))).style(Style::default().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(12),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(14),
        Constraint::Length(16),
        Constraint::Length(10),
        Constraint::Length(12),
        Constraint::Length(9),
    ];
    let table = Table::new(state.nodes.iter().map(node_row), widths)
        .header(header_row)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title("nodes (cores unless noted)"),
        );
    frame.render_widget(table, chunks[1]);

    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints(state.nodes.iter().map(|_| Constraint::Length(4)))
        .split(chunks[2]);
    for (track, area) in state.nodes.iter().zip(rows.iter()) {
        sparklines(frame, *area, track);
    }

    let room = usize::from(chunks[3].height.saturating_sub(2));
    let lines: Vec<Line<'_>> = state
        .log
        .iter()
        .skip(state.log.len().saturating_sub(room))
        .map(|e| Line::from(format_line(e.at, &e.text)))
        .collect();
    let log = Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title("events"));
    frame.render_widget(log, chunks[3]);
}

/// The view on the real terminal.
pub struct Tui {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    keys_done: Arc<AtomicBool>,
}

impl Tui {
    /// Switches the terminal to the alternate screen and raw mode, and watches the keyboard:
    /// Ctrl-C or `q` cancel `stop` (raw mode turns Ctrl-C into a key, not a signal).
    pub fn start(stop: CancellationToken) -> Result<Tui, StoryError> {
        enable_raw_mode().map_err(StoryError::Terminal)?;
        let mut stdout = std::io::stdout();
        if let Err(error) = execute!(stdout, EnterAlternateScreen) {
            let _ = disable_raw_mode();
            return Err(StoryError::Terminal(error));
        }
        let keys_done = Arc::new(AtomicBool::new(false));
        let done = keys_done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if !event::poll(Duration::from_millis(200)).unwrap_or(false) {
                    continue;
                }
                if let Ok(Event::Key(key)) = event::read() {
                    let ctrl_c =
                        key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || key.code == KeyCode::Char('q') {
                        stop.cancel();
                    }
                }
            }
        });
        let tui = Tui {
            terminal: Terminal::new(CrosstermBackend::new(stdout)).map_err(StoryError::Terminal)?,
            keys_done,
        };
        Ok(tui)
    }
}

impl View for Tui {
    fn update(&mut self, state: &StoryState) -> Result<(), StoryError> {
        self.terminal
            .draw(|frame| draw(frame, state))
            .map(|_| ())
            .map_err(StoryError::Terminal)
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.keys_done.store(true, Ordering::Relaxed);
        let _ = disable_raw_mode();
        let _ = execute!(self.terminal.backend_mut(), LeaveAlternateScreen);
        let _ = self.terminal.show_cursor();
    }
}
