#[automatically_derived]
const _: () = {
    use ::dlpack_core as __dlpack;
    #[automatically_derived]
    unsafe impl __dlpack::Export for Matrix
    where
        Vec<f32>: __dlpack::Buffer,
        [usize; 2]: __dlpack::Dims,
    {
        const GIVES_VEC: ::core::primitive::bool = <Vec<
            f32,
        > as __dlpack::Buffer>::GIVES_VEC;
        fn check(&self) -> ::core::result::Result<(), __dlpack::Error> {
            ::core::result::Result::Ok(())
        }
        fn ndim(&self) -> ::core::primitive::usize {
            <[usize; 2] as __dlpack::Dims>::ndim(&self.dims)
        }
        fn describe(
            &mut self,
            __shape: &mut [::core::primitive::i64],
            __strides: &mut [::core::primitive::i64],
        ) -> __dlpack::ExportDesc {
            __dlpack::__private::describe_buffer(
                &mut self.values,
                &self.dims,
                ::core::option::Option::None::<&[::core::primitive::i64; 0]>,
                0,
                __shape,
                __strides,
            )
        }
        fn give_vec(&mut self, __slot: &mut dyn ::core::any::Any) {
            let __ndim = <[usize; 2] as __dlpack::Dims>::ndim(&self.dims);
            let mut __sizes = <[::core::primitive::i64]>::repeat(&[0], __ndim);
            <[usize; 2] as __dlpack::Dims>::write_dims(&self.dims, &mut __sizes);
            let mut __elements: ::core::primitive::usize = 1;
            for &__size in &__sizes {
                let ::core::result::Result::Ok(__size) = <::core::primitive::usize as ::core::convert::TryFrom<
                    ::core::primitive::i64,
                >>::try_from(__size) else {
                    return;
                };
                let ::core::option::Option::Some(__product) = __elements
                    .checked_mul(__size) else {
                    return;
                };
                __elements = __product;
            }
            if __elements == <Vec<f32> as __dlpack::Buffer>::len(&self.values) {
                __dlpack::__private::give_vec_of_buffer(&mut self.values, __slot);
            }
        }
    }
    #[automatically_derived]
    impl ::core::convert::TryFrom<__dlpack::ManagedTensor> for Matrix
    where
        for<'__dlpack> Vec<f32>: __dlpack::Buffer,
        for<'__dlpack> [usize; 2]: __dlpack::Dims,
        String: ::core::default::Default,
    {
        type Error = __dlpack::Error;
        fn try_from(
            __tensor: __dlpack::ManagedTensor,
        ) -> ::core::result::Result<Self, __dlpack::Error> {
            let __tensor = match __dlpack::ManagedTensor::reclaim::<Self>(__tensor) {
                ::core::result::Result::Ok(__value) => {
                    return ::core::result::Result::Ok(__value);
                }
                ::core::result::Result::Err(__tensor) => __tensor,
            };
            let __found = __dlpack::CheckedTensor::dtype(&__tensor);
            let __expected = <<Vec<
                f32,
            > as __dlpack::Buffer>::Elem as __dlpack::Element>::DTYPE;
            if __found != __expected {
                return ::core::result::Result::Err(__dlpack::Error::DataTypeMismatch {
                    found: __found,
                    expected: __expected,
                });
            }
            let __shape = <[usize; 2] as __dlpack::Dims>::from_dims(
                __dlpack::CheckedTensor::shape(&__tensor),
            )?;
            let __data = <Vec<f32> as __dlpack::Buffer>::copy_from_tensor(&__tensor)?;
            ::core::result::Result::Ok(Self {
                values: __data,
                dims: __shape,
                name: <String as ::core::default::Default>::default(),
            })
        }
    }
};
