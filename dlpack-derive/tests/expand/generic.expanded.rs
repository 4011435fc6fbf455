#[automatically_derived]
const _: () = {
    use tensors as __dlpack;
    #[automatically_derived]
    unsafe impl<T: Element, const N: usize> __dlpack::Export for Tensor<T, N>
    where
        T: Copy,
        Box<[T]>: __dlpack::Buffer,
        [usize; N]: __dlpack::Dims,
        [isize; N]: __dlpack::Dims,
        u64: ::core::marker::Copy,
        ::core::primitive::u64: ::core::convert::TryFrom<u64>,
        Tensor<T, N>: ::core::marker::Send + 'static,
    {
        const GIVES_VEC: ::core::primitive::bool = false;
        fn check(&self) -> ::core::result::Result<(), __dlpack::Error> {
            let __found = <[isize; N] as __dlpack::Dims>::ndim(&self.strides);
            let __expected = <[usize; N] as __dlpack::Dims>::ndim(&self.shape);
            if __found != __expected {
                return ::core::result::Result::Err(__dlpack::Error::NdimMismatch {
                    found: __found,
                    expected: __expected,
                });
            }
            let __claimed: __dlpack::Device = self.device;
            let __actual = <Box<[T]> as __dlpack::Buffer>::device(&self.data);
            if __claimed.device_type != __actual.device_type {
                return ::core::result::Result::Err(__dlpack::Error::DeviceMismatch {
                    claimed: __claimed,
                    actual: __actual,
                });
            }
            ::core::result::Result::Ok(())
        }
        fn ndim(&self) -> ::core::primitive::usize {
            <[usize; N] as __dlpack::Dims>::ndim(&self.shape)
        }
        fn describe(
            &mut self,
            __shape: &mut [::core::primitive::i64],
            __strides: &mut [::core::primitive::i64],
        ) -> __dlpack::ExportDesc {
            let mut __desc = __dlpack::__private::describe_buffer(
                &mut self.data,
                &self.shape,
                ::core::option::Option::Some(&self.strides),
                ::core::result::Result::unwrap_or(
                    <::core::primitive::u64 as ::core::convert::TryFrom<
                        u64,
                    >>::try_from(self.offset),
                    ::core::primitive::u64::MAX,
                ),
                __shape,
                __strides,
            );
            __desc.flags |= __dlpack::Flags::READ_ONLY;
            let __device: __dlpack::Device = self.device;
            let __same_device_type = __device.device_type == __desc.device.device_type;
            if __same_device_type {
                __desc.device = __device;
            }
            if <[isize; N] as __dlpack::Dims>::ndim(&self.strides) != __shape.len()
                || !__same_device_type
            {
                if let ::core::option::Option::Some(__allocation) = &mut __desc
                    .allocation
                {
                    __allocation.end = __allocation.start;
                }
            }
            __desc
        }
        fn give_vec(&mut self, __slot: &mut dyn ::core::any::Any) {
            let _ = __slot;
        }
    }
    #[automatically_derived]
    impl<T: Element, const N: usize> ::core::convert::TryFrom<__dlpack::ManagedTensor>
    for Tensor<T, N>
    where
        T: Copy,
        for<'__dlpack> Box<[T]>: __dlpack::Buffer,
        for<'__dlpack> [usize; N]: __dlpack::Dims,
        for<'__dlpack> [isize; N]: __dlpack::Dims,
        for<'__dlpack> u64: ::core::marker::Copy,
        for<'__dlpack> ::core::primitive::u64: ::core::convert::TryFrom<u64>,
        for<'__dlpack> Tensor<T, N>: ::core::marker::Send + 'static,
        u64: ::core::default::Default,
        for<'__dlpack> Device: ::core::convert::From<__dlpack::Device>,
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
            let __expected = <<Box<
                [T],
            > as __dlpack::Buffer>::Elem as __dlpack::Element>::DTYPE;
            if __found != __expected {
                return ::core::result::Result::Err(__dlpack::Error::DataTypeMismatch {
                    found: __found,
                    expected: __expected,
                });
            }
            let __shape = <[usize; N] as __dlpack::Dims>::from_dims(
                __dlpack::CheckedTensor::shape(&__tensor),
            )?;
            let mut __data = <Box<
                [T],
            > as __dlpack::Buffer>::copy_from_tensor(&__tensor)?;
            let __strides: [isize; N] = {
                let __ndim = <[usize; N] as __dlpack::Dims>::ndim(&__shape);
                let mut __sizes = <[::core::primitive::i64]>::repeat(&[0], __ndim);
                let mut __row_major = <[::core::primitive::i64]>::repeat(&[0], __ndim);
                let _ = __dlpack::__private::describe_buffer(
                    &mut __data,
                    &__shape,
                    ::core::option::Option::None::<&[::core::primitive::i64; 0]>,
                    0,
                    &mut __sizes,
                    &mut __row_major,
                );
                <[isize; N] as __dlpack::Dims>::from_dims(&__row_major)?
            };
            let __device: __dlpack::Device = {
                let __copied = <Box<[T]> as __dlpack::Buffer>::device(&__data);
                let __claimed = __dlpack::CheckedTensor::device(&__tensor);
                if __claimed.device_type == __copied.device_type {
                    __claimed
                } else {
                    __copied
                }
            };
            ::core::result::Result::Ok(Self {
                data: __data,
                shape: __shape,
                strides: __strides,
                offset: <u64 as ::core::default::Default>::default(),
                device: ::core::convert::From::from(__device),
            })
        }
    }
};
