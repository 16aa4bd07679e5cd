// Lane-divergent scf.if (nested, with a result; lanes >= n must not touch a) and an scf.for with a per-lane trip count.
#layout = #hal.pipeline.layout<constants = 1, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @divergent_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @divergent ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @divergent() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c3 = arith.constant 3 : index
        %c5 = arith.constant 5 : index
        %one = arith.constant 1.0 : f32
        %two = arith.constant 2.0 : f32
        %zero = arith.constant 0.0 : f32
        %n32 = hal.interface.constant.load layout(#layout) ordinal(0) : i32
        %n = arith.index_cast %n32 : i32 to index
        %a = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<?xf32>{%n}
        %o1 = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<64xf32>
        %o2 = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<64xf32>
        %o3 = hal.interface.binding.subspan layout(#layout) binding(3) alignment(64) offset(%c0) : memref<64xf32>
        %tid = gpu.thread_id x
        %inb = arith.cmpi ult, %tid, %n : index
        scf.if %inb {
          %x = memref.load %a[%tid] : memref<?xf32>
          %m3 = arith.remui %tid, %c3 : index
          %is0 = arith.cmpi eq, %m3, %c0 : index
          %r = scf.if %is0 -> (f32) {
            %y = arith.mulf %x, %two : f32
            memref.store %y, %o1[%tid] : memref<64xf32>
            scf.yield %y : f32
          } else {
            %y = arith.addf %x, %one : f32
            scf.yield %y : f32
          }
          memref.store %r, %o2[%tid] : memref<64xf32>
        }
        %tc = arith.remui %tid, %c5 : index
        %sum = scf.for %k = %c0 to %tc step %c1 iter_args(%acc = %zero) -> (f32) {
          %kk = arith.index_cast %k : index to i32
          %kf = arith.sitofp %kk : i32 to f32
          %acc2 = arith.addf %acc, %kf : f32
          scf.yield %acc2 : f32
        }
        memref.store %sum, %o3[%tid] : memref<64xf32>
        return
      }
    }
  }
}
