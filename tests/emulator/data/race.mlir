// Two warps: every thread writes sh[tid] and reads sh[63 - tid] (written by the other warp) with no barrier between: a shared-memory race. Tests put gpu.barrier at the BARRIER comment.
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @race_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @race ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @race() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 32>} {
        %c63 = arith.constant 63 : index
        %c0 = arith.constant 0 : index
        %o = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<64xf32>
        %sh = memref.alloc() : memref<64xf32, #gpu.address_space<workgroup>>
        %tid = gpu.thread_id x
        %ti = arith.index_cast %tid : index to i32
        %f = arith.sitofp %ti : i32 to f32
        memref.store %f, %sh[%tid] : memref<64xf32, #gpu.address_space<workgroup>>
        // BARRIER
        %j = arith.subi %c63, %tid : index
        %v = memref.load %sh[%j] : memref<64xf32, #gpu.address_space<workgroup>>
        memref.store %v, %o[%tid] : memref<64xf32>
        return
      }
    }
  }
}
