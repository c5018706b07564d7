//! The step DAG: dependency order, cycles, and the sets `--from` / `--only` select.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Order nodes so that every node comes after its needs, keeping declaration order otherwise.
/// On a cycle, returns the ids along it (first id repeated at the end).
///
/// A depth-first search with an explicit stack: a chain of any length needs no call depth.
pub fn topo_order(
    ids: &[&str],
    needs: &BTreeMap<&str, Vec<&str>>,
) -> Result<Vec<usize>, Vec<String>> {
    let index: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let deps: Vec<Vec<usize>> = ids
        .iter()
        .map(|id| {
            needs
                .get(id)
                .into_iter()
                .flatten()
                .filter_map(|d| index.get(d).copied())
                .collect()
        })
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut marks = vec![Mark::New; ids.len()];
    let mut order = Vec::with_capacity(ids.len());
    // The current path: a node and how many of its needs were visited.
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..ids.len() {
        if marks[root] != Mark::New {
            continue;
        }
        marks[root] = Mark::Active;
        path.push((root, 0));
        while let Some(top) = path.last_mut() {
            let (n, next) = *top;
            let Some(&d) = deps[n].get(next) else {
                marks[n] = Mark::Done;
                order.push(n);
                path.pop();
                continue;
            };
            top.1 += 1;
            match marks[d] {
                Mark::Done => {}
                Mark::Active => {
                    let from = path.iter().position(|&(p, _)| p == d).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|&(p, _)| ids[p].to_string())
                        .collect();
                    cycle.push(ids[d].to_string());
                    return Err(cycle);
                }
                Mark::New => {
                    marks[d] = Mark::Active;
                    path.push((d, 0));
                }
            }
        }
    }
    Ok(order)
}

/// `start` and every step that (transitively) needs it.
pub fn downstream<'a>(
    start: &'a str,
    needs: &BTreeMap<&'a str, Vec<&'a str>>,
) -> BTreeSet<&'a str> {
    let mut dependents: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, deps) in needs {
        for d in deps {
            dependents.entry(d).or_default().push(id);
        }
    }
    let mut set = BTreeSet::from([start]);
    let mut stack = vec![start];
    while let Some(n) = stack.pop() {
        for &d in dependents.get(n).into_iter().flatten() {
            if set.insert(d) {
                stack.push(d);
            }
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_dependencies_first() {
        let ids = ["c", "a", "b"];
        let needs = BTreeMap::from([("c", vec!["b"]), ("b", vec!["a"]), ("a", vec![])]);
        let order: Vec<&str> = topo_order(&ids, &needs)
            .unwrap()
            .iter()
            .map(|&i| ids[i])
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert_eq!(downstream("b", &needs), BTreeSet::from(["b", "c"]));
    }

    #[test]
    fn reports_the_cycle() {
        let ids = ["a", "b"];
        let needs = BTreeMap::from([("a", vec!["b"]), ("b", vec!["a"])]);
        assert_eq!(topo_order(&ids, &needs).unwrap_err(), ["a", "b", "a"]);
    }

    #[test]
    fn a_chain_of_200_000_steps_needs_no_call_depth() {
        let names: Vec<String> = (0..200_000).map(|i| format!("s{i}")).collect();
        // Declared last-first: the search walks the whole chain from the first root.
        let ids: Vec<&str> = names.iter().rev().map(String::as_str).collect();
        let needs: BTreeMap<&str, Vec<&str>> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.as_str(),
                    names[..i].last().map(String::as_str).into_iter().collect(),
                )
            })
            .collect();
        let order = topo_order(&ids, &needs).unwrap();
        assert_eq!(ids[order[0]], "s0");
        assert_eq!(ids[order[199_999]], "s199999");
        assert_eq!(downstream("s199998", &needs).len(), 2);
    }
}
