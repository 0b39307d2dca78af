//! The canonical text form of a program: deterministic (same program, same bytes), `\n` line
//! endings, dense numbering in creation order, names from the model, one op per line.
//!
//! ```text
//! program decode.b1 tokens=1 sample_rows=1
//!   v0 weight token_embd.weight bf16[512,64]
//!   ...
//!   op0 embed = gather(v0, v1) -> v2 bf16[1,64]
//! ```

use super::Program;
use std::fmt::Write;

pub fn program_to_text(p: &Program) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "program {} tokens={} sample_rows={}", p.label(), p.tokens, p.sample_rows);
    for (i, v) in p.values.iter().enumerate() {
        let _ = writeln!(s, "  v{i} {} {} {}{}", v.class.name(), v.name, v.dtype, v.shape);
    }
    for (i, node) in p.ops.iter().enumerate() {
        let args: Vec<String> = node.op.reads().iter().map(|v| v.to_string()).collect();
        let outs: Vec<String> = node
            .op
            .writes()
            .iter()
            .map(|&id| {
                let v = p.value(id);
                format!("{id} {}{}", v.dtype, v.shape)
            })
            .collect();
        let attrs: Vec<String> = node.op.attrs().into_iter().map(|(k, v)| format!(" {k}={v}")).collect();
        let _ = writeln!(s, "  op{i} {} = {}({}){} -> {}", node.name, node.op.mnemonic(), args.join(", "), attrs.concat(), outs.join(", "));
    }
    s
}
