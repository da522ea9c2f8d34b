//! Markdown tables with aligned columns.

/// A table: a header row, then rows of cells; numeric-looking columns align right.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are left empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, c) in row.iter().enumerate().take(w.len()) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        w.iter().map(|&x| x.max(3)).collect()
    }

    fn right_aligned(&self, col: usize) -> bool {
        self.rows.iter().all(|r| {
            r.get(col)
                .and_then(|c| c.chars().next())
                .is_none_or(|ch| ch.is_ascii_digit() || ch == '-')
        })
    }

    fn line(cells: &[String], widths: &[usize], right: &[bool]) -> String {
        let mut s = String::from("|");
        for (i, w) in widths.iter().enumerate() {
            let c = cells.get(i).map_or("", String::as_str);
            let pad = w - c.chars().count();
            if right[i] {
                s += &format!(" {}{} |", " ".repeat(pad), c);
            } else {
                s += &format!(" {}{} |", c, " ".repeat(pad));
            }
        }
        s
    }

    /// The table as Markdown.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let right: Vec<bool> = (0..widths.len()).map(|i| self.right_aligned(i)).collect();
        let mut out = Self::line(&self.header, &widths, &right);
        out.push('\n');
        out.push('|');
        for (w, r) in widths.iter().zip(&right) {
            let dashes = "-".repeat(w - 1);
            out += &if *r {
                format!(" {dashes}: |")
            } else {
                format!(" {dashes}- |")
            };
        }
        out.push('\n');
        for row in &self.rows {
            out += &Self::line(row, &widths, &right);
            out.push('\n');
        }
        out
    }

    /// Prints the table after a `### title` line and a blank line.
    pub fn print(&self, title: &str) {
        println!("### {title}\n\n{}", self.render());
    }
}
