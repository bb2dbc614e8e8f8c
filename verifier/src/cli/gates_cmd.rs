//! `kverify gates`: list the twelve gates.

use crate::gates::GATES;

/// The gate list as text.
pub fn list() -> String {
    let mut s = format!("{:<7} {:<24} {:<16} {}\n", "id", "name", "kind", "question");
    for g in GATES.iter() {
        s += &format!(
            "{:<7} {:<24} {:<16} {}\n",
            g.id,
            g.name,
            if g.tolerance_free { "tolerance-free" } else { "thresholded" },
            g.question
        );
    }
    s
}
