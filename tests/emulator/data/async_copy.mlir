// Two warps: two cp.async groups global->shared; after wait(1) only group 1 is visible (mid = in[:512], stale = uninitialised), after wait(0) + barrier every thread reads the chunk of thread 63 - tid of group 2.
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @async_copy_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @async_copy ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @async_copy() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %in = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<1024xf16>
        %out = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<512xf16>
        %mid = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<512xf16>
        %stale = hal.interface.binding.subspan layout(#layout) binding(3) alignment(64) offset(%c0) : memref<512xf16>
        %sh = memref.alloc() : memref<1024xf16, #gpu.address_space<workgroup>>
        %tid = gpu.thread_id x
        %i = affine.apply affine_map<(t) -> (t * 8)>(%tid)
        %i2 = affine.apply affine_map<(t) -> (t * 8 + 512)>(%tid)
        %t1 = nvgpu.device_async_copy %in[%i], %sh[%i], 8 : memref<1024xf16> to memref<1024xf16, #gpu.address_space<workgroup>>
        %g1 = nvgpu.device_async_create_group %t1
        %t2 = nvgpu.device_async_copy %in[%i2], %sh[%i2], 8 : memref<1024xf16> to memref<1024xf16, #gpu.address_space<workgroup>>
        %g2 = nvgpu.device_async_create_group %t2
        nvgpu.device_async_wait %g1 numGroups = 1
        %m = vector.load %sh[%i] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
        vector.store %m, %mid[%i] : memref<512xf16>, vector<8xf16>
        %s = vector.load %sh[%i2] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
        vector.store %s, %stale[%i] : memref<512xf16>, vector<8xf16>
        nvgpu.device_async_wait %g2
        gpu.barrier
        %j = affine.apply affine_map<(t) -> ((63 - t) * 8 + 512)>(%tid)
        %v = vector.load %sh[%j] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
        vector.store %v, %out[%i] : memref<512xf16>, vector<8xf16>
        return
      }
    }
  }
}
