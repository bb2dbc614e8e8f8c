//! Pass 1b of [`super::bind`]: a dimension `X * S` whose factor S no bare dimension, scalar or
//! explicit value gave, while X is known, binds S = extent / X — repeated while that binds
//! something (GVA: v's heads `H * G` give G once q gave H). An extent that is not a positive
//! multiple of X is [`BindError::NotMultiple`], naming the tensor.

use super::{parse, Args, BindError, Signature, SizeTable};

/// Binds what product dimensions determine (see the module docs).
pub(super) fn solve(meta: &Signature<'_>, args: &Args, sizes: &mut SizeTable) -> Result<(), BindError> {
    loop {
        let mut progress = false;
        for p in meta.params {
            let Some(t) = args.tensors.get(&p.name).filter(|_| !p.shape.is_empty()) else { continue };
            for (d, text) in p.shape.iter().enumerate() {
                let e = parse(|| format!("parameter `{}` shape[{d}]", p.name), text)?;
                match e.solve_factor(t.shape[d] as i64, &sizes.env()) {
                    Some(Ok((s, v))) => {
                        sizes.record(&s, v as u64, format!("parameter `{}` dim {d} (`{text}`)", p.name))?;
                        progress = true;
                    }
                    Some(Err(factor)) => return Err(BindError::NotMultiple { param: p.name.clone(), dim: d, expr: text.clone(), found: t.shape[d], factor }),
                    None => {}
                }
            }
        }
        if !progress {
            break;
        }
    }
    Ok(())
}
