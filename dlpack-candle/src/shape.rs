//! The shapes candle can hold: the one place this crate answers that question.

use candle_core::Shape;
use dlpack_core::Dims;

use crate::CandleError;

/// The candle shape for DLPack sizes, or why candle cannot hold a tensor of that shape.
///
/// candle multiplies sizes in `usize` without checking for overflow, in several orders: the
/// element count from the first size on (`Shape::elem_count`), contiguous strides from the last
/// one on (`Shape::stride_contiguous`, run by `Tensor::from_storage`), and products over any
/// chosen axes (`mean`, `matmul`'s batch, `StridedIndex`). Each such product is either 0 or a
/// product of some of the non-zero sizes, so all of them fit `usize` exactly when the product
/// of the non-zero sizes does; that is the condition here. It matters only for tensors without
/// elements (a size of 0 makes any other sizes valid DLPack): a tensor with elements has fewer
/// than `usize::MAX` of them, or dlpack-core would have refused it.
///
/// # Errors
///
/// [`dlpack_core::Error::DimOutOfRange`] for a negative size or one beyond `usize`, and
/// [`dlpack_core::Error::Overflow`] when the non-zero sizes multiply past `usize::MAX`.
pub(crate) fn candle_shape(sizes: &[i64]) -> Result<Shape, CandleError> {
    let dims = Vec::<usize>::from_dims(sizes)?;
    check_products(&dims)?;
    Ok(Shape::from(dims))
}

/// Checks that the non-zero `dims` multiply within `usize` (see [`candle_shape`]).
///
/// # Errors
///
/// [`dlpack_core::Error::Overflow`] when they do not.
pub(crate) fn check_products(dims: &[usize]) -> Result<(), CandleError> {
    let fits = dims
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |product, &d| product.checked_mul(d))
        .is_some();
    if fits {
        return Ok(());
    }
    Err(dlpack_core::Error::Overflow {
        what: format!(
            "the sizes {dims:?} multiply past usize::MAX once the zeros are left out; candle multiplies sizes unchecked (the element count from the first size, contiguous strides from the last, products over any axes), so it cannot hold a tensor of this shape"
        ),
    }
    .into())
}
