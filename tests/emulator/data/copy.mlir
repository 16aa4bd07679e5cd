// Copy kernel: each thread copies 8 contiguous f16 with vector.load/store; n from constant 0.
#layout = #hal.pipeline.layout<constants = 1, bindings = [
  #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @copy_exe {
  hal.executable.variant public @cuda target(#target) {
    hal.executable.export public @copy ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @copy() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c8 = arith.constant 8 : index
        %c64 = arith.constant 64 : index
        %n32 = hal.interface.constant.load layout(#layout) ordinal(0) : i32
        %n = arith.index_castui %n32 : i32 to index
        %in = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0)
               flags(ReadOnly) : memref<?xf16>{%n}
        %out = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0)
               : memref<?xf16>{%n}
        %tid = gpu.thread_id x
        %bid = gpu.block_id x
        %t0 = arith.muli %bid, %c64 : index
        %t1 = arith.addi %t0, %tid : index
        %i = arith.muli %t1, %c8 : index
        %v = vector.load %in[%i] : memref<?xf16>, vector<8xf16>
        vector.store %v, %out[%i] : memref<?xf16>, vector<8xf16>
        return
      }
    }
  }
}
