//! The driver side of the Level Zero loader interface: the function-pointer tables ("DDI
//! tables") that the loader asks a driver for through its `zeGet*ProcAddrTable` exports.
//!
//! Each table mirrors its `ze_ddi.h` struct field by field (Debian bookworm's `libze-dev`,
//! API 1.4). A slot this driver implements has the type of the bound function
//! (`crate::sys::pfn::zeMemFree`), so the Rust compiler checks the implementation's signature;
//! a slot it leaves empty is `Option<Unused>` and stays `None`, which the loader reports to
//! callers as `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE`.
//!
//! `dlpack-oneapi`'s `ze_header_layout` test includes this file and checks every table's size
//! and field offsets against `ze_ddi.h`, and that each filled slot's C type is that of the
//! function named for it.
#![allow(non_camel_case_types, non_snake_case)]

/// The type of a slot this driver does not fill.
pub type Unused = unsafe extern "C" fn();

/// One table, for the header test: its C name, the export that fills it, and its fields in
/// order, each with the function this driver puts there (`None`: left empty).
#[allow(dead_code)] // read by the header test, which includes this file
#[derive(Clone, Copy, Debug)]
pub struct TableInfo {
    /// The C struct name (`ze_mem_dditable_t`).
    pub name: &'static str,
    /// The driver export that fills it (`zeGetMemProcAddrTable`).
    pub getter: &'static str,
    /// `size_of` the Rust struct.
    pub size: usize,
    /// `(field, offset, function)` in declaration order; empty for a table mirrored only by its
    /// size (an array of NULL slots).
    pub fields: &'static [(&'static str, usize, Option<&'static str>)],
}

macro_rules! ddi_slot {
    (_) => { Option<Unused> };
    ($fun:ident) => { Option<crate::sys::pfn::$fun> };
}

macro_rules! ddi_function_name {
    (_) => {
        None
    };
    ($fun:ident) => {
        Some(stringify!($fun))
    };
}

macro_rules! ddi_tables {
    ($(
        $(#[$doc:meta])*
        $table:ident via $getter:ident {
            $($field:ident : $fun:tt),* $(,)?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Default, Debug)]
            pub struct $table {
                $(
                    #[doc = concat!("`", stringify!($field), "`")]
                    pub $field: ddi_slot!($fun),
                )*
            }
        )*

        /// Every table, for the header test.
        #[allow(dead_code)] // read by the header test, which includes this file
        pub const TABLES: &[TableInfo] = &[$(
            TableInfo {
                name: stringify!($table),
                getter: stringify!($getter),
                size: core::mem::size_of::<$table>(),
                fields: &[$((
                    stringify!($field),
                    core::mem::offset_of!($table, $field),
                    ddi_function_name!($fun),
                )),*],
            }
        ),*];
    };
}

macro_rules! slot_tables {
    ($(
        $(#[$doc:meta])*
        $table:ident via $getter:ident [$slots:literal]
    )*) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Default, Debug)]
            pub struct $table(pub [Option<Unused>; $slots]);
        )*

        /// Every table mirrored by its size only, for the header test.
        #[allow(dead_code)] // read by the header test, which includes this file
        pub const SLOT_TABLES: &[TableInfo] = &[$(
            TableInfo {
                name: stringify!($table),
                getter: stringify!($getter),
                size: core::mem::size_of::<$table>(),
                fields: &[],
            }
        ),*];
    };
}

ddi_tables! {
    /// `ze_global_dditable_t`.
    ze_global_dditable_t via zeGetGlobalProcAddrTable {
        pfnInit: zeInit,
    }

    /// `ze_driver_dditable_t`.
    ze_driver_dditable_t via zeGetDriverProcAddrTable {
        pfnGet: zeDriverGet,
        pfnGetApiVersion: zeDriverGetApiVersion,
        pfnGetProperties: _,
        pfnGetIpcProperties: _,
        pfnGetExtensionProperties: _,
        pfnGetExtensionFunctionAddress: _,
    }

    /// `ze_device_dditable_t`.
    ze_device_dditable_t via zeGetDeviceProcAddrTable {
        pfnGet: zeDeviceGet,
        pfnGetSubDevices: zeDeviceGetSubDevices,
        pfnGetProperties: zeDeviceGetProperties,
        pfnGetComputeProperties: _,
        pfnGetModuleProperties: _,
        pfnGetCommandQueueGroupProperties: _,
        pfnGetMemoryProperties: _,
        pfnGetMemoryAccessProperties: _,
        pfnGetCacheProperties: _,
        pfnGetImageProperties: _,
        pfnGetExternalMemoryProperties: _,
        pfnGetP2PProperties: _,
        pfnCanAccessPeer: _,
        pfnGetStatus: _,
        pfnGetGlobalTimestamps: _,
        pfnReserveCacheExt: _,
        pfnSetCacheAdviceExt: _,
        pfnPciGetPropertiesExt: _,
    }

    /// `ze_context_dditable_t`.
    ze_context_dditable_t via zeGetContextProcAddrTable {
        pfnCreate: zeContextCreate,
        pfnDestroy: zeContextDestroy,
        pfnGetStatus: _,
        pfnSystemBarrier: _,
        pfnMakeMemoryResident: _,
        pfnEvictMemory: _,
        pfnMakeImageResident: _,
        pfnEvictImage: _,
        pfnCreateEx: _,
    }

    /// `ze_command_list_dditable_t`.
    ze_command_list_dditable_t via zeGetCommandListProcAddrTable {
        pfnCreate: _,
        pfnCreateImmediate: zeCommandListCreateImmediate,
        pfnDestroy: zeCommandListDestroy,
        pfnClose: _,
        pfnReset: _,
        pfnAppendWriteGlobalTimestamp: _,
        pfnAppendBarrier: zeCommandListAppendBarrier,
        pfnAppendMemoryRangesBarrier: _,
        pfnAppendMemoryCopy: zeCommandListAppendMemoryCopy,
        pfnAppendMemoryFill: _,
        pfnAppendMemoryCopyRegion: _,
        pfnAppendMemoryCopyFromContext: _,
        pfnAppendImageCopy: _,
        pfnAppendImageCopyRegion: _,
        pfnAppendImageCopyToMemory: _,
        pfnAppendImageCopyFromMemory: _,
        pfnAppendMemoryPrefetch: _,
        pfnAppendMemAdvise: _,
        pfnAppendSignalEvent: _,
        pfnAppendWaitOnEvents: _,
        pfnAppendEventReset: _,
        pfnAppendQueryKernelTimestamps: _,
        pfnAppendLaunchKernel: _,
        pfnAppendLaunchCooperativeKernel: _,
        pfnAppendLaunchKernelIndirect: _,
        pfnAppendLaunchMultipleKernelsIndirect: _,
        pfnAppendImageCopyToMemoryExt: _,
        pfnAppendImageCopyFromMemoryExt: _,
    }

    /// `ze_event_pool_dditable_t`.
    ze_event_pool_dditable_t via zeGetEventPoolProcAddrTable {
        pfnCreate: zeEventPoolCreate,
        pfnDestroy: zeEventPoolDestroy,
        pfnGetIpcHandle: _,
        pfnOpenIpcHandle: _,
        pfnCloseIpcHandle: _,
    }

    /// `ze_event_dditable_t`.
    ze_event_dditable_t via zeGetEventProcAddrTable {
        pfnCreate: zeEventCreate,
        pfnDestroy: zeEventDestroy,
        pfnHostSignal: _,
        pfnHostSynchronize: zeEventHostSynchronize,
        pfnQueryStatus: zeEventQueryStatus,
        pfnHostReset: zeEventHostReset,
        pfnQueryKernelTimestamp: _,
    }

    /// `ze_mem_dditable_t`.
    ze_mem_dditable_t via zeGetMemProcAddrTable {
        pfnAllocShared: zeMemAllocShared,
        pfnAllocDevice: zeMemAllocDevice,
        pfnAllocHost: zeMemAllocHost,
        pfnFree: zeMemFree,
        pfnGetAllocProperties: zeMemGetAllocProperties,
        pfnGetAddressRange: zeMemGetAddressRange,
        pfnGetIpcHandle: _,
        pfnOpenIpcHandle: _,
        pfnCloseIpcHandle: _,
        pfnFreeExt: _,
    }

    /// `ze_command_queue_dditable_t` (left empty).
    ze_command_queue_dditable_t via zeGetCommandQueueProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
        pfnExecuteCommandLists: _,
        pfnSynchronize: _,
    }

    /// `ze_image_dditable_t` (left empty).
    ze_image_dditable_t via zeGetImageProcAddrTable {
        pfnGetProperties: _,
        pfnCreate: _,
        pfnDestroy: _,
        pfnGetAllocPropertiesExt: _,
    }

    /// `ze_fence_dditable_t` (left empty).
    ze_fence_dditable_t via zeGetFenceProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
        pfnHostSynchronize: _,
        pfnQueryStatus: _,
        pfnReset: _,
    }

    /// `ze_module_dditable_t` (left empty).
    ze_module_dditable_t via zeGetModuleProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
        pfnDynamicLink: _,
        pfnGetNativeBinary: _,
        pfnGetGlobalPointer: _,
        pfnGetKernelNames: _,
        pfnGetProperties: _,
        pfnGetFunctionPointer: _,
        pfnInspectLinkageExt: _,
    }

    /// `ze_module_build_log_dditable_t` (left empty).
    ze_module_build_log_dditable_t via zeGetModuleBuildLogProcAddrTable {
        pfnDestroy: _,
        pfnGetString: _,
    }

    /// `ze_kernel_dditable_t` (left empty).
    ze_kernel_dditable_t via zeGetKernelProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
        pfnSetCacheConfig: _,
        pfnSetGroupSize: _,
        pfnSuggestGroupSize: _,
        pfnSuggestMaxCooperativeGroupCount: _,
        pfnSetArgumentValue: _,
        pfnSetIndirectAccess: _,
        pfnGetIndirectAccess: _,
        pfnGetSourceAttributes: _,
        pfnGetProperties: _,
        pfnGetName: _,
    }

    /// `ze_sampler_dditable_t` (left empty).
    ze_sampler_dditable_t via zeGetSamplerProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
    }

    /// `ze_physical_mem_dditable_t` (left empty).
    ze_physical_mem_dditable_t via zeGetPhysicalMemProcAddrTable {
        pfnCreate: _,
        pfnDestroy: _,
    }

    /// `ze_virtual_mem_dditable_t` (left empty).
    ze_virtual_mem_dditable_t via zeGetVirtualMemProcAddrTable {
        pfnReserve: _,
        pfnFree: _,
        pfnQueryPageSize: _,
        pfnMap: _,
        pfnUnmap: _,
        pfnSetAccessAttribute: _,
        pfnGetAccessAttribute: _,
    }
}

slot_tables! {
    /// `zet_device_dditable_t` (tools API; left empty).
    zet_device_dditable_t via zetGetDeviceProcAddrTable [1]
    /// `zet_context_dditable_t` (left empty).
    zet_context_dditable_t via zetGetContextProcAddrTable [1]
    /// `zet_command_list_dditable_t` (left empty).
    zet_command_list_dditable_t via zetGetCommandListProcAddrTable [4]
    /// `zet_module_dditable_t` (left empty).
    zet_module_dditable_t via zetGetModuleProcAddrTable [1]
    /// `zet_kernel_dditable_t` (left empty).
    zet_kernel_dditable_t via zetGetKernelProcAddrTable [1]
    /// `zet_metric_group_dditable_t` (left empty).
    zet_metric_group_dditable_t via zetGetMetricGroupProcAddrTable [3]
    /// `zet_metric_dditable_t` (left empty).
    zet_metric_dditable_t via zetGetMetricProcAddrTable [2]
    /// `zet_metric_streamer_dditable_t` (left empty).
    zet_metric_streamer_dditable_t via zetGetMetricStreamerProcAddrTable [3]
    /// `zet_metric_query_pool_dditable_t` (left empty).
    zet_metric_query_pool_dditable_t via zetGetMetricQueryPoolProcAddrTable [2]
    /// `zet_metric_query_dditable_t` (left empty).
    zet_metric_query_dditable_t via zetGetMetricQueryProcAddrTable [4]
    /// `zet_tracer_exp_dditable_t` (left empty).
    zet_tracer_exp_dditable_t via zetGetTracerExpProcAddrTable [5]
    /// `zet_debug_dditable_t` (left empty).
    zet_debug_dditable_t via zetGetDebugProcAddrTable [11]
    /// `zes_driver_dditable_t` (sysman API; left empty).
    zes_driver_dditable_t via zesGetDriverProcAddrTable [2]
    /// `zes_device_dditable_t` (left empty).
    zes_device_dditable_t via zesGetDeviceProcAddrTable [29]
    /// `zes_scheduler_dditable_t` (left empty).
    zes_scheduler_dditable_t via zesGetSchedulerProcAddrTable [8]
    /// `zes_performance_factor_dditable_t` (left empty).
    zes_performance_factor_dditable_t via zesGetPerformanceFactorProcAddrTable [3]
    /// `zes_power_dditable_t` (left empty).
    zes_power_dditable_t via zesGetPowerProcAddrTable [8]
    /// `zes_frequency_dditable_t` (left empty).
    zes_frequency_dditable_t via zesGetFrequencyProcAddrTable [17]
    /// `zes_engine_dditable_t` (left empty).
    zes_engine_dditable_t via zesGetEngineProcAddrTable [2]
    /// `zes_standby_dditable_t` (left empty).
    zes_standby_dditable_t via zesGetStandbyProcAddrTable [3]
    /// `zes_firmware_dditable_t` (left empty).
    zes_firmware_dditable_t via zesGetFirmwareProcAddrTable [2]
    /// `zes_memory_dditable_t` (left empty).
    zes_memory_dditable_t via zesGetMemoryProcAddrTable [3]
    /// `zes_fabric_port_dditable_t` (left empty).
    zes_fabric_port_dditable_t via zesGetFabricPortProcAddrTable [6]
    /// `zes_temperature_dditable_t` (left empty).
    zes_temperature_dditable_t via zesGetTemperatureProcAddrTable [4]
    /// `zes_psu_dditable_t` (left empty).
    zes_psu_dditable_t via zesGetPsuProcAddrTable [2]
    /// `zes_fan_dditable_t` (left empty).
    zes_fan_dditable_t via zesGetFanProcAddrTable [6]
    /// `zes_led_dditable_t` (left empty).
    zes_led_dditable_t via zesGetLedProcAddrTable [4]
    /// `zes_ras_dditable_t` (left empty).
    zes_ras_dditable_t via zesGetRasProcAddrTable [4]
    /// `zes_diagnostics_dditable_t` (left empty).
    zes_diagnostics_dditable_t via zesGetDiagnosticsProcAddrTable [3]
}
