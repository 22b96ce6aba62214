//! A YAML 1.1 reader with the behaviour of Go's `gopkg.in/yaml.v2` v2.4.0,
//! which the original service parses its descriptor files with.
//!
//! YAML 1.2 readers (serde_yaml among them) disagree with yaml.v2 on inputs
//! that existing configs rely on (`yes`/`on` are booleans, `010` is octal,
//! duplicate keys are allowed with the last one winning), so this module
//! drives the libyaml event parser itself (through `libyaml-safer`, a safe
//! port of the same C library yaml.v2 was translated from, hence the same
//! error texts) and builds a small [`Node`] tree that keeps what the later
//! phases need: the raw text of every scalar, its YAML 1.1 resolution, and the
//! 1-based line it starts on.
//!
//! Invariants of the tree this module returns:
//! - aliases are expanded (a clone of the anchored node, with its own lines);
//! - merge keys (`<<`) are expanded in place, in yaml.v2's order;
//! - mappings keep every pair in document order, duplicates included, so a
//!   consumer that applies pairs in order gets "last one wins";
//! - nesting is at most [`MAX_DEPTH`] deep and alias expansion is bounded, so
//!   the recursive consumers cannot overflow the stack.

use base64::Engine as _;
use libyaml_safer::{ErrorKind, EventData, Parser, ScalarStyle};
use std::collections::HashMap;

/// Deepest nesting of sequences and mappings accepted.
pub(crate) const MAX_DEPTH: usize = 512;

/// Most nodes an alias expansion may create in one document (the
/// "billion laughs" bound).
const MAX_ALIAS_NODES: usize = 1_000_000;

/// Most bytes the aliases of one document may expand to, as a multiple of
/// the document's own size (a few aliased blocks of a config are a small
/// share of it; a large scalar aliased a thousand times is not), with
/// [`MIN_ALIAS_BYTES`] for small documents. So a document's tree holds at
/// most about `(1 + ALIAS_BYTES_PER_INPUT_BYTE)` times its size in text.
pub(crate) const ALIAS_BYTES_PER_INPUT_BYTE: usize = 4;

/// The alias byte budget of a small document.
pub(crate) const MIN_ALIAS_BYTES: usize = 1 << 20;

/// Bytes the YAML reader is offered at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A YAML node with the 1-based line where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) line: usize,
    pub(crate) kind: NodeKind,
}

/// What a [`Node`] holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NodeKind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    /// Pairs in document order, duplicates kept (see the module invariants).
    Map(Vec<(Node, Node)>),
}

/// A scalar: its text as written (after YAML unescaping) and its resolution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scalar {
    pub(crate) text: String,
    pub(crate) value: Resolved,
}

/// A scalar resolved with the YAML 1.1 rules of yaml.v2.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    /// Any integer yaml.v2 accepts: the int64 range and, above it, uint64.
    Int(i128),
    Float(f64),
    Str,
    /// A `!!binary` scalar: the decoded bytes, which need not be UTF-8.
    Binary(Vec<u8>),
    /// The merge key `<<`.
    Merge,
}

impl Resolved {
    /// The short YAML tag yaml.v2 prints in type errors.
    pub(crate) fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => "!!null",
            Resolved::Bool(_) => "!!bool",
            Resolved::Int(_) => "!!int",
            Resolved::Float(_) => "!!float",
            Resolved::Str | Resolved::Merge => "!!str",
            Resolved::Binary(_) => "!!binary",
        }
    }
}

impl Node {
    /// The tag yaml.v2 names this node by in type errors.
    pub(crate) fn tag(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar(s) => s.value.tag(),
            NodeKind::Seq(_) => "!!seq",
            NodeKind::Map(_) => "!!map",
        }
    }

    fn empty_map(line: usize) -> Node {
        Node {
            line,
            kind: NodeKind::Map(Vec::new()),
        }
    }
}

/// A YAML syntax or structure error, already formatted as yaml.v2 formats it
/// (`yaml: line N: <problem>`), plus the 1-based line when one is known even
/// where yaml.v2 omits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) message: String,
    pub(crate) line: Option<usize>,
}

impl SyntaxError {
    fn new(message: impl Into<String>, line: Option<usize>) -> Self {
        SyntaxError {
            message: format!("yaml: {}", message.into()),
            line,
        }
    }

    /// yaml.v2's `parser.fail()`: scanner errors print the 0-based problem
    /// line plus one; parser errors print the 0-based line as it is, falling
    /// back to the context line; line 0 prints nothing.
    fn from_libyaml(err: &libyaml_safer::Error, input: &[u8]) -> Self {
        let problem_line = err.problem_mark().map_or(0, |m| m.line as usize);
        let context_line = err.context_mark().map_or(0, |m| m.line as usize);
        let go_line = if problem_line != 0 {
            if err.kind() == ErrorKind::Scanner {
                problem_line + 1
            } else {
                problem_line
            }
        } else {
            context_line
        };
        let message = if go_line != 0 {
            format!("line {go_line}: {}", err.problem())
        } else {
            err.problem().to_string()
        };
        let line = match err.kind() {
            // The reader reports an offset, not a mark: find the bad byte.
            ErrorKind::Reader => first_invalid_utf8_line(input),
            _ => err.problem_mark().map(|m| m.line as usize + 1),
        };
        SyntaxError::new(message, line)
    }
}

/// The 1-based line of the first byte that is not UTF-8, if any.
fn first_invalid_utf8_line(input: &[u8]) -> Option<usize> {
    let valid = std::str::from_utf8(input).err()?.valid_up_to();
    Some(1 + input[..valid].iter().filter(|&&b| b == b'\n').count())
}

/// The stream as UTF-8. yaml.v2 also reads UTF-16 (little or big endian,
/// told by its byte-order mark); such a stream is transcoded here, because
/// libyaml-safer's UTF-16 reader misreads valid input (it consumes code units
/// as bytes) and asserts on an unpaired surrogate. A broken UTF-16 stream is
/// refused with yaml.v2's reader texts and the line of the bad unit.
fn utf8_input(input: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, SyntaxError> {
    let big_endian = match input {
        [0xFE, 0xFF, ..] => true,
        [0xFF, 0xFE, ..] => false,
        _ => return Ok(std::borrow::Cow::Borrowed(input)),
    };
    let body = &input[2..];
    let units: Vec<u16> = body
        .chunks_exact(2)
        .map(|c| {
            if big_endian {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        })
        .collect();
    let mut out = String::with_capacity(units.len());
    let (mut line, mut at) = (1, 0);
    for ch in char::decode_utf16(units.iter().copied()) {
        match ch {
            Ok(c) => {
                line += usize::from(c == '\n');
                at += c.len_utf16();
                out.push(c);
            }
            Err(e) => {
                let low = (0xDC00..=0xDFFF).contains(&e.unpaired_surrogate());
                let at_end = at + 1 >= units.len();
                let problem = match (low, at_end) {
                    (true, _) => "unexpected low surrogate area",
                    (false, true) => "incomplete UTF-16 surrogate pair",
                    (false, false) => "expected low surrogate area",
                };
                return Err(SyntaxError::new(problem, Some(line)));
            }
        }
    }
    if body.len() % 2 == 1 {
        return Err(SyntaxError::new("incomplete UTF-16 character", Some(line)));
    }
    Ok(std::borrow::Cow::Owned(out.into_bytes()))
}

/// Parses the first document of `input`; later documents are ignored, as
/// yaml.v2 does. An empty stream gives an empty mapping.
pub(crate) fn parse(input: &[u8]) -> Result<Node, SyntaxError> {
    let input = &*utf8_input(input)?;
    let mut parser = Parser::new();
    // The reader decodes whatever its source offers at once into a queue
    // of 4-byte `char`s, the whole file when the source is a slice: fed in
    // chunks, that queue holds at most one chunk instead of 4 times the
    // file.
    parser.set_input(std::io::BufReader::with_capacity(READ_CHUNK, input));
    let mut builder = Builder {
        max_alias_bytes: input
            .len()
            .saturating_mul(ALIAS_BYTES_PER_INPUT_BYTE)
            .max(MIN_ALIAS_BYTES),
        ..Builder::default()
    };
    loop {
        let event = parser
            .parse()
            .map_err(|e| SyntaxError::from_libyaml(&e, input))?;
        let line = event.start_mark.line as usize + 1;
        match event.data {
            EventData::StreamStart { .. } | EventData::DocumentStart { .. } => {}
            EventData::StreamEnd => return Ok(builder.root.unwrap_or(Node::empty_map(1))),
            EventData::DocumentEnd { .. } => {
                return Ok(builder.root.unwrap_or(Node::empty_map(1)));
            }
            EventData::Alias { anchor } => builder.alias(&anchor, line)?,
            EventData::Scalar {
                anchor,
                tag,
                value,
                style,
                ..
            } => {
                let scalar = resolve(value, tag.as_deref(), style, line)?;
                builder.push(
                    Node {
                        line,
                        kind: NodeKind::Scalar(scalar),
                    },
                    anchor,
                )?;
            }
            EventData::SequenceStart { anchor, .. } => {
                builder.open(Frame::Seq(Vec::new()), line, anchor)?
            }
            EventData::MappingStart { anchor, .. } => builder.open(
                Frame::Map {
                    pairs: Vec::new(),
                    key: None,
                },
                line,
                anchor,
            )?,
            EventData::SequenceEnd | EventData::MappingEnd => builder.close()?,
        }
    }
}

enum Frame {
    Seq(Vec<Node>),
    Map {
        pairs: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// Turns the event stream into a tree with an explicit stack (no recursion,
/// whatever the input).
#[derive(Default)]
struct Builder {
    stack: Vec<(Frame, usize, Option<String>)>,
    anchors: HashMap<String, Node>,
    root: Option<Node>,
    alias_nodes: usize,
    /// Bytes the aliases expanded to so far, and the most they may.
    alias_bytes: usize,
    max_alias_bytes: usize,
}

impl Builder {
    fn open(
        &mut self,
        frame: Frame,
        line: usize,
        anchor: Option<String>,
    ) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError::new(
                format!("line {line}: exceeded max depth of {MAX_DEPTH}"),
                Some(line),
            ));
        }
        self.stack.push((frame, line, anchor));
        Ok(())
    }

    fn close(&mut self) -> Result<(), SyntaxError> {
        let Some((frame, line, anchor)) = self.stack.pop() else {
            return Ok(());
        };
        let kind = match frame {
            Frame::Seq(items) => NodeKind::Seq(items),
            Frame::Map { pairs, .. } => NodeKind::Map(pairs),
        };
        self.push(Node { line, kind }, anchor)
    }

    fn alias(&mut self, anchor: &str, line: usize) -> Result<(), SyntaxError> {
        let Some(node) = self.anchors.get(anchor) else {
            return Err(SyntaxError::new(
                format!("unknown anchor '{anchor}' referenced"),
                Some(line),
            ));
        };
        let (nodes, bytes) = size_of(node);
        self.alias_nodes += nodes;
        if self.alias_nodes > MAX_ALIAS_NODES {
            return Err(SyntaxError::new(
                "document contains excessive aliasing",
                Some(line),
            ));
        }
        self.alias_bytes = self.alias_bytes.saturating_add(bytes);
        if self.alias_bytes > self.max_alias_bytes {
            return Err(SyntaxError::new(
                format!(
                    "line {line}: document contains excessive aliasing: aliases expand to more than {} bytes ({} times the file, at least {} MiB)",
                    self.max_alias_bytes,
                    ALIAS_BYTES_PER_INPUT_BYTE,
                    MIN_ALIAS_BYTES >> 20
                ),
                Some(line),
            ));
        }
        let node = node.clone();
        self.push(node, None)
    }

    fn push(&mut self, node: Node, anchor: Option<String>) -> Result<(), SyntaxError> {
        if let Some(anchor) = anchor {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some((Frame::Seq(items), _, _)) => items.push(node),
            Some((Frame::Map { pairs, key }, _, _)) => match key.take() {
                None => *key = Some(node),
                Some(k) => {
                    if is_merge_key(&k) {
                        merge_into(pairs, node)?;
                    } else {
                        pairs.push((k, node));
                    }
                }
            },
        }
        Ok(())
    }
}

/// A node's size as a copy of it costs: its nodes, and the bytes of its
/// nodes and its scalars' text.
fn size_of(node: &Node) -> (usize, usize) {
    let own = (1, std::mem::size_of::<Node>());
    let add = |(n, b): (usize, usize), (m, c): (usize, usize)| (n + m, b + c);
    match &node.kind {
        NodeKind::Scalar(s) => (1, own.1 + s.text.len()),
        NodeKind::Seq(items) => items.iter().map(size_of).fold(own, add),
        NodeKind::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| add(size_of(k), size_of(v)))
            .fold(own, add),
    }
}

fn is_merge_key(node: &Node) -> bool {
    matches!(&node.kind, NodeKind::Scalar(s) if s.value == Resolved::Merge)
}

/// yaml.v2's `merge`: a mapping's pairs are applied where the `<<` stands; for
/// a sequence of mappings the last is applied first so earlier ones win.
fn merge_into(pairs: &mut Vec<(Node, Node)>, value: Node) -> Result<(), SyntaxError> {
    let line = value.line;
    let want_map = || {
        SyntaxError::new(
            "map merge requires map or sequence of maps as the value",
            Some(line),
        )
    };
    match value.kind {
        NodeKind::Map(merged) => pairs.extend(merged),
        NodeKind::Seq(items) => {
            for item in items.into_iter().rev() {
                match item.kind {
                    NodeKind::Map(merged) => pairs.extend(merged),
                    _ => return Err(want_map()),
                }
            }
        }
        NodeKind::Scalar(_) => return Err(want_map()),
    }
    Ok(())
}

/// Resolves one scalar event as yaml.v2 does: quoted and block scalars are
/// strings, plain scalars go through the YAML 1.1 tables, explicit tags win.
fn resolve(
    text: String,
    tag: Option<&str>,
    style: ScalarStyle,
    line: usize,
) -> Result<Scalar, SyntaxError> {
    let value = match tag {
        Some("tag:yaml.org,2002:str") => Resolved::Str,
        Some("tag:yaml.org,2002:binary") => {
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            match base64::engine::general_purpose::STANDARD.decode(compact) {
                Ok(bytes) => Resolved::Binary(bytes),
                Err(_) => {
                    return Err(SyntaxError::new(
                        format!("line {line}: !!binary value contains invalid base64 data"),
                        Some(line),
                    ))
                }
            }
        }
        Some(explicit) if explicit.starts_with("tag:yaml.org,2002:") => {
            let want = &explicit["tag:yaml.org,2002:".len()..];
            let resolved = resolve_plain(&text);
            let got = &resolved.tag()[2..];
            if got != want && !(want == "float" && matches!(resolved, Resolved::Int(_))) {
                return Err(SyntaxError::new(
                    format!("cannot decode {} `{text}` as a !!{want}", resolved.tag()),
                    Some(line),
                ));
            }
            match resolved {
                Resolved::Int(i) if want == "float" => Resolved::Float(i as f64),
                other => other,
            }
        }
        // Unknown local tags (`!foo`) are ignored by yaml.v2's generic decoding.
        Some(_) | None => match style {
            ScalarStyle::Plain | ScalarStyle::Any => resolve_plain(&text),
            _ => Resolved::Str,
        },
    };
    Ok(Scalar { text, value })
}

/// yaml.v2 `resolve()` for a plain scalar.
pub(crate) fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        "<<" => return Resolved::Merge,
        _ => {}
    }
    let first = text.as_bytes()[0];
    match first {
        b'.' => match go_float(text) {
            Some(f) => Resolved::Float(f),
            None => Resolved::Str,
        },
        b'0'..=b'9' | b'+' | b'-' => {
            let plain: String = text.chars().filter(|&c| c != '_').collect();
            if let Some(i) = crate::go::syntax::parse_int(&plain) {
                return Resolved::Int(i);
            }
            if is_yaml_style_float(&plain) {
                if let Some(f) = go_float(&plain) {
                    return Resolved::Float(f);
                }
            }
            Resolved::Str
        }
        _ => Resolved::Str,
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go `strconv.ParseFloat` restricted to what reaches it here (decimal
/// forms); an overflow to infinity is an error in Go, so it is `None`.
fn go_float(s: &str) -> Option<f64> {
    if !s
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

#[cfg(test)]
mod utf16_tests;

#[cfg(test)]
mod tests;
