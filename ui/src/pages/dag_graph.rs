//! A DAG drawn to be read: layers as rows from top to bottom, each step a
//! box sized to its text, each need an arrow from the needed step down to
//! the step that needs it, no arrow through a box.
//!
//! The layered (Sugiyama) method, on the layers the caller gives (a
//! pipeline's depths, a plan's batches, which the page names):
//!
//! 1. An arrow is drawn only where no other path already leads (the
//!    transitive reduction); each box still names all its needs for
//!    readers.
//! 2. An arrow that spans several layers passes through a narrow slot
//!    (a dummy node) in each layer between, so it runs in the gaps between
//!    boxes, never across one.
//! 3. Within each layer, nodes are ordered by the mean position of their
//!    neighbours (the barycenter rule), sweeping down and up; the order with
//!    the fewest crossings is kept.
//! 4. Each node is pulled toward its neighbours' mean x, then nodes are
//!    pushed apart to keep their order and gaps, a few rounds; the drawing
//!    is aimed at the page's width (boxes widen up to a limit).
//! 5. Boxes are sized to their text (a title wraps; the height follows the
//!    lines it takes); an arrow leaves its box straight down to the bottom of
//!    its layer, bends only in the gap between layers, and crosses a layer
//!    only in its own slot.
//!
//! The method is written here rather than taken from a crate: the layered
//! layout crates (`layout-rs`, `rust-sugiyama`) assign layers themselves and
//! size nodes as points or fixed boxes, while these layers are fixed by what
//! the page names (a pipeline's depths, a plan's batches) and each box is
//! HTML whose height follows its wrapped title.
//!
//! Every position is an SVG attribute, never a style, so the pages' content
//! security policy has nothing to refuse. Boxes are HTML in `foreignObject`
//! (each keeps its link, its state class and its text for readers and
//! tests). A drawing wider than the page scrolls inside its frame; the page
//! never does.

use std::collections::{HashMap, HashSet};

use maud::{Markup, html};

/// The width a drawing aims at, in drawing units (CSS pixels at full
/// size): a card's text column at 1280 px.
const TARGET_W: f64 = 940.0;
/// Narrowest and widest box.
const NODE_W_MIN: f64 = 190.0;
const NODE_W_MAX: f64 = 300.0;
/// Width of the slot an arrow takes through a layer it crosses.
const SLOT_W: f64 = 4.0;
/// Space between two boxes in a layer.
const GAP_X: f64 = 22.0;
/// Space beside an arrow's slot.
const SLOT_GAP: f64 = 7.0;
/// Space between layers, where the arrows bend.
const GAP_Y: f64 = 40.0;
/// Margin around the drawing.
const PAD: f64 = 6.0;
/// A box's padding, border and the state line below the title.
const BOX_FRAME_W: f64 = 24.0;
const BOX_FRAME_H: f64 = 16.0;
const STATE_LINE_H: f64 = 17.0;
/// A title line's height, and the width one character of it may take
/// (14 px bold, with room for wrapping at word ends).
const TITLE_LINE_H: f64 = 19.0;
const TITLE_CHAR_W: f64 = 9.2;
/// A state line's character width (0.82 rem).
const STATE_CHAR_W: f64 = 7.6;
/// Ordering sweeps, and rounds of placing.
const SWEEPS: usize = 12;
const PLACING_ROUNDS: usize = 24;

/// One step to draw.
#[derive(Debug)]
pub(super) struct GraphNode<'a> {
    /// Its id, unique in the graph.
    pub id: &'a str,
    /// The box's content (a link, the state).
    pub body: Markup,
    /// Its state's class (`is-done`, …).
    pub class: &'static str,
    /// The ids of the steps it needs.
    pub needs: Vec<&'a str>,
    /// The characters of its title and of its state line, to size the box.
    pub text: (usize, usize),
}

/// Where a box goes and how big it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Place {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// One slot of a layer: a step, or an arrow passing through.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    /// The step at this index of the caller's layer.
    Step(usize),
    /// The `hop`th layer crossing of arrow `edge`.
    Pass { edge: usize },
}

/// An arrow: from the step at (layer, index) to the step at (layer,
/// index).
#[derive(Debug, Clone, Copy)]
struct Edge {
    from: (usize, usize),
    to: (usize, usize),
}

/// The drawing: its size, each layer's slots in order with their x, each
/// layer's top and height, and each box.
#[derive(Debug)]
pub(super) struct Layout {
    pub width: f64,
    pub height: f64,
    /// For each layer, the steps (indexes into that layer's input) in the
    /// order drawn, with their boxes.
    pub rows: Vec<Vec<(usize, Place)>>,
    /// Each arrow as SVG path data.
    pub paths: Vec<String>,
}

/// Every step each step needs, directly or through others.
fn ancestors<'a>(layers: &[Vec<GraphNode<'a>>]) -> HashMap<&'a str, HashSet<&'a str>> {
    let mut all: HashMap<&str, HashSet<&str>> = HashMap::new();
    // Layers are in dependency order: a step's needs are in earlier ones.
    for node in layers.iter().flatten() {
        let mut set = HashSet::new();
        for need in &node.needs {
            set.insert(*need);
            if let Some(theirs) = all.get(need) {
                set.extend(theirs.iter().copied());
            }
        }
        all.insert(node.id, set);
    }
    all
}

/// The needs of `node` to draw: those no other need of it already leads
/// to (the transitive reduction), since the path through that other need
/// shows them.
fn drawn_needs<'a>(
    node: &GraphNode<'a>,
    ancestors: &HashMap<&'a str, HashSet<&'a str>>,
) -> Vec<&'a str> {
    node.needs
        .iter()
        .copied()
        .filter(|need| {
            !node.needs.iter().any(|other| {
                other != need && ancestors.get(other).is_some_and(|a| a.contains(need))
            })
        })
        .collect()
}

/// The arrows to draw, each from an earlier layer to a later one.
fn edges(layers: &[Vec<GraphNode<'_>>]) -> Vec<Edge> {
    let mut at: HashMap<&str, (usize, usize)> = HashMap::new();
    for (l, layer) in layers.iter().enumerate() {
        for (i, node) in layer.iter().enumerate() {
            at.insert(node.id, (l, i));
        }
    }
    let ancestors = ancestors(layers);
    let mut out = Vec::new();
    for (l, layer) in layers.iter().enumerate() {
        for (i, node) in layer.iter().enumerate() {
            for need in drawn_needs(node, &ancestors) {
                if let Some(&from) = at.get(need).filter(|from| from.0 < l) {
                    out.push(Edge { from, to: (l, i) });
                }
            }
        }
    }
    out
}

/// Each layer's slots: its steps in their given order, then a slot in each
/// layer an arrow crosses.
fn slots(layers: &[Vec<GraphNode<'_>>], edges: &[Edge]) -> Vec<Vec<Slot>> {
    let mut rows: Vec<Vec<Slot>> = layers
        .iter()
        .map(|layer| (0..layer.len()).map(Slot::Step).collect())
        .collect();
    for (e, edge) in edges.iter().enumerate() {
        for row in rows.iter_mut().take(edge.to.0).skip(edge.from.0 + 1) {
            row.push(Slot::Pass { edge: e });
        }
    }
    rows
}

/// The slots next to `slot` (in layer `l`) in layer `l - 1` (`up`) or
/// `l + 1`, as positions in that layer's row: what ordering and placing
/// pull toward.
fn neighbours(slot: Slot, l: usize, up: bool, edges: &[Edge], rows: &[Vec<Slot>]) -> Vec<usize> {
    let Some(other) = (if up { l.checked_sub(1) } else { Some(l + 1) }) else {
        return Vec::new();
    };
    let Some(row) = rows.get(other) else {
        return Vec::new();
    };
    // The far end of arrow `e` seen from layer `l`: the step itself when it
    // is in the next layer, else the arrow's slot there.
    let end = |e: usize| -> Slot {
        let edge = edges[e];
        let (layer, index) = if up { edge.from } else { edge.to };
        if layer == other {
            Slot::Step(index)
        } else {
            Slot::Pass { edge: e }
        }
    };
    let wanted: Vec<Slot> = match slot {
        Slot::Pass { edge } => vec![end(edge)],
        Slot::Step(i) => edges
            .iter()
            .enumerate()
            .filter(|(_, e)| if up { e.to == (l, i) } else { e.from == (l, i) })
            .map(|(e, _)| end(e))
            .collect(),
    };
    row.iter()
        .enumerate()
        .filter(|(_, s)| wanted.contains(s))
        .map(|(p, _)| p)
        .collect()
}

/// Crossings between layer `l` and `l + 1` with the slots in their order.
fn crossings(l: usize, edges: &[Edge], rows: &[Vec<Slot>]) -> usize {
    let mut links: Vec<(usize, usize)> = Vec::new();
    for (p, &slot) in rows[l].iter().enumerate() {
        for q in neighbours(slot, l, false, edges, rows) {
            links.push((p, q));
        }
    }
    let mut count = 0;
    for (a, &(p1, q1)) in links.iter().enumerate() {
        for &(p2, q2) in &links[a + 1..] {
            if (p1 < p2 && q1 > q2) || (p1 > p2 && q1 < q2) {
                count += 1;
            }
        }
    }
    count
}

/// Orders every layer's slots by the barycenter rule, sweeping down and up,
/// and keeps the order with the fewest crossings.
fn order(edges: &[Edge], mut rows: Vec<Vec<Slot>>) -> Vec<Vec<Slot>> {
    let total = |rows: &[Vec<Slot>]| -> usize {
        (0..rows.len().saturating_sub(1))
            .map(|l| crossings(l, edges, rows))
            .sum()
    };
    let mut best = (total(&rows), rows.clone());
    for sweep in 0..SWEEPS {
        let down = sweep % 2 == 0;
        let layers: Vec<usize> = if down {
            (1..rows.len()).collect()
        } else {
            (0..rows.len().saturating_sub(1)).rev().collect()
        };
        for l in layers {
            let keyed: Vec<(f64, Slot)> = rows[l]
                .iter()
                .enumerate()
                .map(|(p, &slot)| {
                    let near = neighbours(slot, l, down, edges, &rows);
                    let key = if near.is_empty() {
                        p as f64
                    } else {
                        near.iter().sum::<usize>() as f64 / near.len() as f64
                    };
                    (key, slot)
                })
                .collect();
            let mut keyed = keyed;
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            rows[l] = keyed.into_iter().map(|(_, s)| s).collect();
        }
        let now = total(&rows);
        if now < best.0 {
            best = (now, rows.clone());
        }
    }
    best.1
}

/// The space between two neighbours in a layer.
fn gap(a: &Slot, b: &Slot) -> f64 {
    match (a, b) {
        (Slot::Step(_), Slot::Step(_)) => GAP_X,
        _ => SLOT_GAP,
    }
}

/// A box's height for its title and state at width `w`.
fn box_height(text: (usize, usize), w: f64) -> f64 {
    let inner = (w - BOX_FRAME_W).max(40.0);
    let lines = |chars: usize, char_w: f64| {
        let per_line = (inner / char_w).floor().max(1.0);
        (chars as f64 / per_line).ceil().max(1.0)
    };
    BOX_FRAME_H
        + lines(text.0, TITLE_CHAR_W) * TITLE_LINE_H
        + lines(text.1, STATE_CHAR_W) * STATE_LINE_H
}

/// The width of each box: the drawing aimed at [`TARGET_W`], within limits.
fn node_width(rows: &[Vec<Slot>]) -> f64 {
    let needed = rows
        .iter()
        .map(|row| {
            let steps = row.iter().filter(|s| matches!(s, Slot::Step(_))).count() as f64;
            let passes = row.len() as f64 - steps;
            let gaps: f64 = row.windows(2).map(|w| gap(&w[0], &w[1])).sum();
            (steps, TARGET_W - 2.0 * PAD - gaps - passes * SLOT_W)
        })
        .filter(|(steps, _)| *steps > 0.0)
        .map(|(steps, room)| room / steps)
        .fold(NODE_W_MAX, f64::min);
    needed.clamp(NODE_W_MIN, NODE_W_MAX)
}

/// Each slot's left x: pulled toward its neighbours' centres, then pushed
/// apart in order, a few rounds.
fn place_x(edges: &[Edge], rows: &[Vec<Slot>], node_w: f64) -> Vec<Vec<f64>> {
    let width = |s: &Slot| match s {
        Slot::Step(_) => node_w,
        Slot::Pass { .. } => SLOT_W,
    };
    let mut xs: Vec<Vec<f64>> = rows
        .iter()
        .map(|row| {
            let mut x = PAD;
            let mut before: Option<&Slot> = None;
            row.iter()
                .map(|s| {
                    x += before.map_or(0.0, |b| gap(b, s));
                    let left = x;
                    x += width(s);
                    before = Some(s);
                    left
                })
                .collect()
        })
        .collect();
    for round in 0..PLACING_ROUNDS {
        let up = round % 2 == 0;
        for l in 0..rows.len() {
            let wanted: Vec<f64> = rows[l]
                .iter()
                .enumerate()
                .map(|(p, s)| {
                    let other = if up { l.wrapping_sub(1) } else { l + 1 };
                    let near = neighbours(*s, l, up, edges, rows);
                    if near.is_empty() {
                        return xs[l][p];
                    }
                    let centre: f64 = near
                        .iter()
                        .map(|&q| xs[other][q] + width(&rows[other][q]) / 2.0)
                        .sum::<f64>()
                        / near.len() as f64;
                    centre - width(s) / 2.0
                })
                .collect();
            let widths: Vec<f64> = rows[l].iter().map(width).collect();
            let gaps: Vec<f64> = rows[l].windows(2).map(|w| gap(&w[0], &w[1])).collect();
            xs[l] = spread(&wanted, &widths, &gaps);
        }
    }
    // The leftmost slot at the margin.
    let min = xs.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    for x in xs.iter_mut().flatten() {
        *x += PAD - min;
    }
    xs
}

/// The left edges nearest to `wanted` (least squares) that keep the slots
/// in order, each at least its gap (`gaps[p - 1]`) after the one before:
/// isotonic regression by pooling adjacent violators, on the edges less
/// the room the slots before them need.
fn spread(wanted: &[f64], widths: &[f64], gaps: &[f64]) -> Vec<f64> {
    let mut offsets = Vec::with_capacity(wanted.len());
    let mut room = 0.0;
    for p in 0..wanted.len() {
        if p > 0 {
            room += widths[p - 1] + gaps[p - 1];
        }
        offsets.push(room);
    }
    // Blocks of (mean, count): each block's values pooled to their mean.
    let mut blocks: Vec<(f64, usize)> = Vec::new();
    for (w, o) in wanted.iter().zip(&offsets) {
        blocks.push((w - o, 1));
        while blocks.len() > 1 {
            let (last, n) = blocks[blocks.len() - 1];
            let (before, m) = blocks[blocks.len() - 2];
            if before <= last {
                break;
            }
            blocks.pop();
            let merged = (before * m as f64 + last * n as f64) / (m + n) as f64;
            if let Some(block) = blocks.last_mut() {
                *block = (merged, m + n);
            }
        }
    }
    let pooled = blocks
        .iter()
        .flat_map(|&(mean, n)| std::iter::repeat_n(mean, n));
    pooled.zip(&offsets).map(|(y, o)| y + o).collect()
}

/// Lays out `layers` (each node's needs in earlier layers).
pub(super) fn layout(layers: &[Vec<GraphNode<'_>>]) -> Layout {
    let edges = edges(layers);
    let rows = order(&edges, slots(layers, &edges));
    let node_w = node_width(&rows);
    let xs = place_x(&edges, &rows, node_w);
    // Each layer as tall as its tallest box.
    let mut tops = Vec::with_capacity(rows.len());
    let mut heights = Vec::with_capacity(rows.len());
    let mut y = PAD;
    for (l, row) in rows.iter().enumerate() {
        let h = row
            .iter()
            .filter_map(|s| match s {
                Slot::Step(i) => Some(box_height(layers[l][*i].text, node_w)),
                Slot::Pass { .. } => None,
            })
            .fold(0.0, f64::max)
            .max(STATE_LINE_H + BOX_FRAME_H);
        tops.push(y);
        heights.push(h);
        y += h + GAP_Y;
    }
    let height = y - GAP_Y + PAD;
    let width = rows
        .iter()
        .zip(&xs)
        .filter_map(|(row, x)| {
            let last = row.last()?;
            let w = if matches!(last, Slot::Step(_)) {
                node_w
            } else {
                SLOT_W
            };
            x.last().map(|x| x + w)
        })
        .fold(0.0, f64::max)
        + PAD;
    let boxes: Vec<Vec<(usize, Place)>> = rows
        .iter()
        .enumerate()
        .map(|(l, row)| {
            row.iter()
                .zip(&xs[l])
                .filter_map(|(slot, &x)| match slot {
                    Slot::Step(i) => Some((
                        *i,
                        Place {
                            x,
                            y: tops[l],
                            w: node_w,
                            h: box_height(layers[l][*i].text, node_w),
                        },
                    )),
                    Slot::Pass { .. } => None,
                })
                .collect()
        })
        .collect();
    let paths = paths(&edges, &rows, &xs, (&tops, &heights), &boxes);
    Layout {
        width,
        height,
        rows: boxes,
        paths,
    }
}

/// Each arrow's path: straight down from its box to the bottom of its
/// layer, a curve in each gap, straight down through each layer it crosses
/// in its slot, into the top of the box that needs it.
fn paths(
    edges: &[Edge],
    rows: &[Vec<Slot>],
    xs: &[Vec<f64>],
    (tops, heights): (&[f64], &[f64]),
    boxes: &[Vec<(usize, Place)>],
) -> Vec<String> {
    let centre_of = |(l, i): (usize, usize)| -> Option<(f64, Place)> {
        boxes[l]
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, p)| (p.x + p.w / 2.0, *p))
    };
    let mut out = Vec::new();
    for (e, edge) in edges.iter().enumerate() {
        let (Some((x0, from)), Some((x_end, _))) = (centre_of(edge.from), centre_of(edge.to))
        else {
            continue;
        };
        // The x where the arrow crosses each layer between.
        let mut stops: Vec<f64> = Vec::new();
        for l in edge.from.0 + 1..edge.to.0 {
            let p = rows[l].iter().position(|s| *s == Slot::Pass { edge: e });
            if let Some(p) = p {
                stops.push(xs[l][p] + SLOT_W / 2.0);
            }
        }
        let mut d = format!("M{x0:.1} {:.1}", from.y + from.h);
        let mut x = x0;
        let mut bottom = tops[edge.from.0] + heights[edge.from.0];
        d.push_str(&format!(" L{x:.1} {bottom:.1}"));
        for (k, l) in (edge.from.0 + 1..edge.to.0).enumerate() {
            let next = stops.get(k).copied().unwrap_or(x);
            let top = tops[l];
            d.push_str(&curve(x, bottom, next, top));
            x = next;
            bottom = top + heights[l];
            d.push_str(&format!(" L{x:.1} {bottom:.1}"));
        }
        d.push_str(&curve(x, bottom, x_end, tops[edge.to.0] - 5.0));
        out.push(d);
    }
    out
}

/// A curve from (x1, y1) down to (x2, y2), leaving and arriving vertically.
fn curve(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    let bend = (y2 - y1) / 2.0;
    format!(
        " C{x1:.1} {:.1} {x2:.1} {:.1} {x2:.1} {y2:.1}",
        y1 + bend,
        y2 - bend
    )
}

/// The graph: `layers` named `layer_name N` for readers.
pub(super) fn dag_graph(layers: &[Vec<GraphNode<'_>>], layer_name: &str) -> Markup {
    let layout = layout(layers);
    let (w, h) = (layout.width.ceil(), layout.height.ceil());
    html! {
        div.dag {
            svg.dag-graph viewBox={"0 0 " (w) " " (h)} width=(w) height=(h) {
                defs {
                    marker #dag-arrow viewBox="0 0 10 10" refX="5" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                        path d="M0 0 L10 5 L0 10 z" {}
                    }
                }
                g aria-hidden="true" {
                    @for d in &layout.paths {
                        path.dag-edge d=(d) marker-end="url(#dag-arrow)" {}
                    }
                }
                @for (depth, (layer, row)) in layers.iter().zip(&layout.rows).enumerate() {
                    g.dag-layer role="list" aria-label={(layer_name) " " (depth + 1)} {
                        @for &(i, place) in row {
                            @let node = &layer[i];
                            foreignObject role="listitem" x=(place.x.round()) y=(place.y.round())
                                width=(place.w.round()) height=(place.h.round()) {
                                div.dag-step.(node.class) data-step=(node.id) { (node.body) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(id: &'a str, needs: &[&'a str]) -> GraphNode<'a> {
        GraphNode {
            id,
            body: html! { (id) },
            class: "is-pending",
            needs: needs.to_vec(),
            text: (id.len(), 7),
        }
    }

    fn order_of<'a>(layers: &[Vec<GraphNode<'a>>], layout: &Layout, l: usize) -> Vec<&'a str> {
        layout.rows[l]
            .iter()
            .map(|&(i, _)| layers[l][i].id)
            .collect()
    }

    #[test]
    fn each_need_no_other_path_shows_is_one_arrow_and_needs_pull_steps_under_them() {
        let mut layers = vec![
            vec![node("a", &[]), node("b", &[])],
            vec![
                node("from-b", &["b"]),
                node("from-a", &["a"]),
                node("both", &["a", "b"]),
            ],
        ];
        let layout = layout(&layers);
        assert_eq!(layout.paths.len(), 4);
        assert_eq!(order_of(&layers, &layout, 1), ["from-a", "both", "from-b"]);
        // c needs a and from-a, which needs a: one arrow shows both.
        layers.push(vec![node("c", &["a", "from-a"])]);
        assert_eq!(super::layout(&layers).paths.len(), 5);
        let html = dag_graph(&layers, "Layer").into_string();
        assert!(!html.contains("style="), "positions are attributes: {html}");
    }

    #[test]
    fn a_long_arrow_takes_a_slot_in_each_layer_it_crosses_beside_the_boxes() {
        // w → x → y → z, and a → z across the two layers between.
        let layers = vec![
            vec![node("a", &[]), node("w", &[])],
            vec![node("x", &["w"])],
            vec![node("y", &["x"])],
            vec![node("z", &["y", "a"])],
        ];
        let edges = edges(&layers);
        let rows = order(&edges, slots(&layers, &edges));
        let passes = |l: usize| {
            rows[l]
                .iter()
                .filter(|s| matches!(s, Slot::Pass { .. }))
                .count()
        };
        assert_eq!((passes(0), passes(1), passes(2), passes(3)), (0, 1, 1, 0));
        let node_w = node_width(&rows);
        let xs = place_x(&edges, &rows, node_w);
        for (row, x) in rows.iter().zip(&xs) {
            let mut right = f64::NEG_INFINITY;
            for (slot, &left) in row.iter().zip(x) {
                assert!(left >= right, "{row:?} at {x:?} overlap");
                right = left
                    + if matches!(slot, Slot::Step(_)) {
                        node_w
                    } else {
                        SLOT_W
                    };
            }
        }
    }

    #[test]
    fn ordering_undoes_crossings_the_given_order_makes() {
        // Given crossed: the second row lists b's child first.
        let layers = vec![
            vec![node("a", &[]), node("b", &[])],
            vec![node("from-b", &["b"]), node("from-a", &["a"])],
            vec![node("under-b", &["from-b"]), node("under-a", &["from-a"])],
        ];
        let edges = edges(&layers);
        let given = slots(&layers, &edges);
        assert_eq!(crossings(0, &edges, &given), 1);
        let ordered = order(&edges, given);
        assert_eq!(
            crossings(0, &edges, &ordered) + crossings(1, &edges, &ordered),
            0
        );
    }

    #[test]
    fn spreading_keeps_the_order_and_moves_the_least() {
        let widths = [10.0, 10.0, 10.0];
        let gaps = [5.0, 5.0];
        // Room enough: nothing moves.
        assert_eq!(
            spread(&[0.0, 20.0, 40.0], &widths, &gaps),
            [0.0, 20.0, 40.0]
        );
        // Two want one place: they part evenly about it.
        assert_eq!(
            spread(&[0.0, 50.0, 50.0], &widths, &gaps),
            [0.0, 42.5, 57.5]
        );
        // Out of order: pooled, in order, a gap apart.
        let out = spread(&[30.0, 0.0, 60.0], &widths, &gaps);
        assert!(
            out[1] - out[0] >= 15.0 - 1e-9 && out[2] - out[1] >= 15.0 - 1e-9,
            "{out:?}"
        );
    }

    #[test]
    fn a_box_is_as_tall_as_its_wrapped_title() {
        let short = box_height((10, 7), 200.0);
        let long = box_height((80, 7), 200.0);
        assert!(long >= short + 2.0 * TITLE_LINE_H, "{short} {long}");
    }
}
