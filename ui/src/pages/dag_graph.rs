//! A DAG drawn to fit its page: layers as rows from top to bottom, each
//! step a box, each need an arrow from the needed step down to the step
//! that needs it.
//!
//! The layout is computed here, in units of one drawing (about pixels at
//! full size), into one SVG: the arrows as paths, each box as HTML in a
//! `foreignObject` (so it keeps its link, its state class and its text for
//! readers and tests). An arrow is drawn only where no other path already
//! leads (the transitive reduction); each box still names all its needs
//! for readers. Every position is an SVG attribute, never a style,
//! so the pages' content security policy has nothing to refuse; the SVG
//! scales as one picture to the page's width, never wider than its natural
//! size. Within a layer, steps
//! are ordered by the mean position of their needs (the barycenter rule),
//! which keeps most arrows from crossing.

use std::collections::{HashMap, HashSet};

use maud::{Markup, html};

/// Width of one step's box, in drawing units (about pixels at full size).
const NODE_W: f64 = 200.0;
/// Height of one step's box.
const NODE_H: f64 = 52.0;
/// Space between boxes in a layer.
const GAP_X: f64 = 24.0;
/// Space between layers, where the arrows run.
const GAP_Y: f64 = 30.0;
/// Margin around the drawing.
const PAD: f64 = 6.0;

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
}

/// Where each box goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Place {
    pub x: f64,
    pub y: f64,
}

/// The drawing's size and each node's place, layer by layer in the order
/// drawn.
#[derive(Debug)]
pub(super) struct Layout {
    pub width: f64,
    pub height: f64,
    /// For each layer, its nodes' indexes (into that layer's input) in
    /// drawing order, with their places.
    pub rows: Vec<Vec<(usize, Place)>>,
}

/// Lays out `layers` (each node's needs in earlier layers).
pub(super) fn layout(layers: &[Vec<GraphNode<'_>>]) -> Layout {
    let widest = layers.iter().map(Vec::len).max().unwrap_or(0) as f64;
    let width = (widest * (NODE_W + GAP_X) - GAP_X).max(NODE_W) + 2.0 * PAD;
    let height = (layers.len() as f64 * (NODE_H + GAP_Y) - GAP_Y).max(NODE_H) + 2.0 * PAD;
    let mut centre: HashMap<&str, f64> = HashMap::new();
    let mut rows = Vec::with_capacity(layers.len());
    for (depth, layer) in layers.iter().enumerate() {
        let mut order: Vec<(usize, f64)> = layer
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let xs: Vec<f64> = node
                    .needs
                    .iter()
                    .filter_map(|n| centre.get(n).copied())
                    .collect();
                let key = if xs.is_empty() {
                    f64::MAX
                } else {
                    xs.iter().sum::<f64>() / xs.len() as f64
                };
                (i, key)
            })
            .collect();
        // Stable: steps with no placed need keep their defined order, after
        // the others.
        order.sort_by(|a, b| a.1.total_cmp(&b.1));
        let row_width = order.len() as f64 * (NODE_W + GAP_X) - GAP_X;
        let left = (width - row_width) / 2.0;
        let y = PAD + depth as f64 * (NODE_H + GAP_Y);
        let row: Vec<(usize, Place)> = order
            .iter()
            .enumerate()
            .map(|(slot, &(i, _))| {
                (
                    i,
                    Place {
                        x: left + slot as f64 * (NODE_W + GAP_X),
                        y,
                    },
                )
            })
            .collect();
        for &(i, place) in &row {
            centre.insert(layer[i].id, place.x + NODE_W / 2.0);
        }
        rows.push(row);
    }
    Layout {
        width,
        height,
        rows,
    }
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

/// The arrows: from the bottom centre of each drawn need to the top centre
/// of the step that needs it, as SVG path data.
pub(super) fn arrows(layers: &[Vec<GraphNode<'_>>], layout: &Layout) -> Vec<String> {
    let mut places: HashMap<&str, Place> = HashMap::new();
    for (layer, row) in layers.iter().zip(&layout.rows) {
        for &(i, place) in row {
            places.insert(layer[i].id, place);
        }
    }
    let ancestors = ancestors(layers);
    let mut paths = Vec::new();
    for layer in layers {
        for node in layer {
            let Some(to) = places.get(node.id) else {
                continue;
            };
            for need in &drawn_needs(node, &ancestors) {
                let Some(from) = places.get(need) else {
                    continue;
                };
                let (x1, y1) = (from.x + NODE_W / 2.0, from.y + NODE_H);
                let (x2, y2) = (to.x + NODE_W / 2.0, to.y);
                let bend = (y2 - y1) / 2.0;
                paths.push(format!(
                    "M{x1:.1} {y1:.1} C{x1:.1} {:.1} {x2:.1} {:.1} {x2:.1} {:.1}",
                    y1 + bend,
                    y2 - bend,
                    y2 - 5.0
                ));
            }
        }
    }
    paths
}

/// The graph: `layers` named `layer_name N` for readers.
pub(super) fn dag_graph(layers: &[Vec<GraphNode<'_>>], layer_name: &str) -> Markup {
    let layout = layout(layers);
    let (w, h) = (layout.width.round(), layout.height.round());
    html! {
        div.dag {
            svg.dag-graph viewBox={"0 0 " (w) " " (h)} width=(w) height=(h) {
                defs {
                    marker #dag-arrow viewBox="0 0 10 10" refX="5" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                        path d="M0 0 L10 5 L0 10 z" {}
                    }
                }
                g aria-hidden="true" {
                    @for d in arrows(layers, &layout) {
                        path.dag-edge d=(d) marker-end="url(#dag-arrow)" {}
                    }
                }
                @for (depth, (layer, row)) in layers.iter().zip(&layout.rows).enumerate() {
                    g.dag-layer role="list" aria-label={(layer_name) " " (depth + 1)} {
                        @for &(i, place) in row {
                            @let node = &layer[i];
                            foreignObject role="listitem" x=(place.x.round()) y=(place.y.round()) width=(NODE_W) height=(NODE_H) {
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
        }
    }

    #[test]
    fn each_need_no_other_path_shows_is_one_arrow_and_needs_pull_steps_under_them() {
        let layers = vec![
            vec![node("a", &[]), node("b", &[])],
            vec![
                node("from-b", &["b"]),
                node("from-a", &["a"]),
                node("both", &["a", "b"]),
            ],
        ];
        let layout = layout(&layers);
        let arrows = arrows(&layers, &layout);
        assert_eq!(arrows.len(), 4);
        let order: Vec<&str> = layout.rows[1]
            .iter()
            .map(|&(i, _)| layers[1][i].id)
            .collect();
        assert_eq!(
            order,
            ["from-a", "both", "from-b"],
            "ordered under their needs"
        );
        for (layer, row) in layers.iter().zip(&layout.rows) {
            for &(_, place) in row {
                assert!(
                    place.x >= 0.0 && place.x + NODE_W <= layout.width,
                    "{place:?} in {}",
                    layout.width
                );
                assert!(place.y + NODE_H <= layout.height);
            }
            assert_eq!(row.len(), layer.len());
        }
        let html = dag_graph(&layers, "Layer").into_string();
        assert_eq!(html.matches("class=\"dag-edge\"").count(), 4);
        assert!(html.contains("viewBox=\"0 0 660 146\""), "{html}");
        assert!(!html.contains("style="), "positions are attributes: {html}");
        // c needs a and from-a, which needs a: the path through from-a
        // shows c's need of a, so it is one arrow, not two.
        let mut deeper = layers;
        deeper.push(vec![node("c", &["a", "from-a"])]);
        let layout = super::layout(&deeper);
        assert_eq!(super::arrows(&deeper, &layout).len(), 5);
    }
}
