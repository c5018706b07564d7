//! The step DAG: dependency order, cycles, and the sets `--from` / `--only` select.

use std::collections::{BTreeMap, BTreeSet};

/// Order nodes so that every node comes after its needs, keeping declaration order otherwise.
/// On a cycle, returns the ids along it (first id repeated at the end).
pub fn topo_order(
    ids: &[&str],
    needs: &BTreeMap<&str, Vec<&str>>,
) -> Result<Vec<usize>, Vec<String>> {
    let index: BTreeMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut marks = vec![Mark::New; ids.len()];
    let mut order = Vec::with_capacity(ids.len());
    let mut path: Vec<usize> = Vec::new();

    fn visit(
        n: usize,
        ids: &[&str],
        index: &BTreeMap<&str, usize>,
        needs: &BTreeMap<&str, Vec<&str>>,
        marks: &mut [Mark],
        path: &mut Vec<usize>,
        order: &mut Vec<usize>,
    ) -> Result<(), Vec<String>> {
        match marks[n] {
            Mark::Done => return Ok(()),
            Mark::Active => {
                let from = path.iter().position(|&p| p == n).unwrap_or(0);
                let mut cycle: Vec<String> =
                    path[from..].iter().map(|&p| ids[p].to_string()).collect();
                cycle.push(ids[n].to_string());
                return Err(cycle);
            }
            Mark::New => {}
        }
        marks[n] = Mark::Active;
        path.push(n);
        for dep in needs.get(ids[n]).into_iter().flatten() {
            if let Some(&d) = index.get(dep) {
                visit(d, ids, index, needs, marks, path, order)?;
            }
        }
        path.pop();
        marks[n] = Mark::Done;
        order.push(n);
        Ok(())
    }

    for n in 0..ids.len() {
        visit(n, ids, &index, needs, &mut marks, &mut path, &mut order)?;
    }
    Ok(order)
}

/// `start` and every step that (transitively) needs it.
pub fn downstream<'a>(
    start: &'a str,
    needs: &BTreeMap<&'a str, Vec<&'a str>>,
) -> BTreeSet<&'a str> {
    let mut set = BTreeSet::from([start]);
    loop {
        let before = set.len();
        for (id, deps) in needs {
            if deps.iter().any(|d| set.contains(d)) {
                set.insert(id);
            }
        }
        if set.len() == before {
            return set;
        }
    }
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
}
