// scratch (not committed): a subgroup-sharing 8x8 matmul vs the engine's, on the local driver
use std::time::Instant;
use wgpu::util::DeviceExt;
const M: u32 = 128;
const K: u32 = 384;
const N: u32 = 1536;
const SG: &str = r#"
@group(0) @binding(0) var<storage, read> a4: array<vec4f>;
@group(0) @binding(1) var<storage, read> b4: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
const M: u32 = 128u; const K: u32 = 384u; const N: u32 = 1536u;
// workgroup 64 = 8 subgroups of 8 lanes (4 rows x 2 cols of subgroups); subgroup tile 16 x 32; lane 2 x 4 of 8x8 blocks
@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) l: u32, @builtin(subgroup_size) sgs: u32) {
  let sg = li / 8u;
  let m_sg = wid.y * 64u + (sg / 2u) * 16u;
  let n_sg = wid.x * 64u + (sg % 2u) * 32u;
  let lr = l / 4u; let lc = l % 4u;
  var acc: array<vec4f, 16>;
  for (var k = 0u; k < K; k += 4u) {
    // this lane's share of the subgroup's A rows (2) and B rows (4)
    let a_0 = a4[((m_sg + 2u * l) * K + k) / 4u];
    let a_1 = a4[((m_sg + 2u * l + 1u) * K + k) / 4u];
    let b_0 = b4[((n_sg + 4u * l) * K + k) / 4u];
    let b_1 = b4[((n_sg + 4u * l + 1u) * K + k) / 4u];
    let b_2 = b4[((n_sg + 4u * l + 2u) * K + k) / 4u];
    let b_3 = b4[((n_sg + 4u * l + 3u) * K + k) / 4u];
    var bv: array<vec4f, 8>;
    for (var j = 0u; j < 8u; j += 4u) {
      let src = lc * 2u + j / 4u;
      bv[j] = subgroupShuffle(b_0, src);
      bv[j + 1u] = subgroupShuffle(b_1, src);
      bv[j + 2u] = subgroupShuffle(b_2, src);
      bv[j + 3u] = subgroupShuffle(b_3, src);
    }
    // B transposed to k-major: lo = cols 0..4, hi = 4..8, per k
    let k0lo = vec4f(bv[0].x, bv[1].x, bv[2].x, bv[3].x); let k0hi = vec4f(bv[4].x, bv[5].x, bv[6].x, bv[7].x);
    let k1lo = vec4f(bv[0].y, bv[1].y, bv[2].y, bv[3].y); let k1hi = vec4f(bv[4].y, bv[5].y, bv[6].y, bv[7].y);
    let k2lo = vec4f(bv[0].z, bv[1].z, bv[2].z, bv[3].z); let k2hi = vec4f(bv[4].z, bv[5].z, bv[6].z, bv[7].z);
    let k3lo = vec4f(bv[0].w, bv[1].w, bv[2].w, bv[3].w); let k3hi = vec4f(bv[4].w, bv[5].w, bv[6].w, bv[7].w);
    for (var i = 0u; i < 8u; i += 2u) {
      let src = lr * 4u + i / 2u;
      let r0 = subgroupShuffle(a_0, src);
      let r1 = subgroupShuffle(a_1, src);
      acc[2u * i] += r0.x * k0lo + r0.y * k1lo + r0.z * k2lo + r0.w * k3lo;
      acc[2u * i + 1u] += r0.x * k0hi + r0.y * k1hi + r0.z * k2hi + r0.w * k3hi;
      acc[2u * i + 2u] += r1.x * k0lo + r1.y * k1lo + r1.z * k2lo + r1.w * k3lo;
      acc[2u * i + 3u] += r1.x * k0hi + r1.y * k1hi + r1.z * k2hi + r1.w * k3hi;
    }
  }
  let m0 = m_sg + lr * 8u; let n0 = n_sg + lc * 8u;
  for (var i = 0u; i < 8u; i++) {
    for (var j = 0u; j < 4u; j++) {
      c[(m0 + i) * N + n0 + j] = acc[2u * i][j];
      c[(m0 + i) * N + n0 + 4u + j] = acc[2u * i + 1u][j];
    }
  }
  if (sgs != 8u) { c[0] = 12345.0; }
}
"#;
fn main() {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    println!(
        "{:?} {:?}",
        adapter.get_info().name,
        adapter.get_info().driver_info
    );
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: wgpu::Features::SUBGROUP,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .unwrap();
    let a: Vec<f32> = (0..M * K)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
        .collect();
    let b: Vec<f32> = (0..N * K)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 9.0)
        .collect();
    let mut want = vec![0f32; (M * N) as usize];
    for m in 0..M {
        for n in 0..N {
            let mut s = 0.0;
            for k in 0..K {
                s += a[(m * K + k) as usize] * b[(n * K + k) as usize];
            }
            want[(m * N + n) as usize] = s;
        }
    }
    let st = wgpu::BufferUsages::STORAGE;
    let mk = |d: &[f32], u| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(d),
            usage: u,
        })
    };
    let ba = mk(&a, st);
    let bb = mk(&b, st);
    let bc = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (M * N * 4) as u64,
        usage: st | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let rb = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (M * N * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut params = vec![0u32; 20];
    params[0] = M;
    params[1] = N;
    params[2] = K;
    params[3] = 1;
    params[7] = K;
    params[11] = K;
    params[15] = N;
    params[16] = 1;
    params[18] = 1f32.to_bits();
    let bp = mk(bytemuck::cast_slice(&params), wgpu::BufferUsages::UNIFORM);
    let base = concat!(
        include_str!("../shaders/common.wgsl"),
        include_str!("../shaders/matmul.wgsl")
    );
    let variants: Vec<(&str, &str, Vec<&wgpu::Buffer>)> = vec![
        ("engine 8x8", base, vec![&bp, &ba, &ba, &bb, &bb, &bb, &bc]),
        ("subgroup 8x8 shared", SG, vec![&ba, &bb, &bc]),
    ];
    for (name, src, bufs) in variants {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let entries: Vec<_> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        });
        let run = |reps: u32| {
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                for _ in 0..reps {
                    pass.dispatch_workgroups(N / 64, M / 64, 1);
                }
            }
            queue.submit([enc.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        };
        run(1);
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&bc, 0, &rb, 0, (M * N * 4) as u64);
        queue.submit([enc.finish()]);
        rb.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let got: Vec<f32> =
            bytemuck::cast_slice(&rb.slice(..).get_mapped_range().unwrap()).to_vec();
        rb.unmap();
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        let reps = 5;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            run(reps);
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "{name:24} {:8.2} ms {:6.1} GFLOP/s  max err {err:.2e}",
            best * 1e3,
            2.0 * (M * N * K) as f64 / best / 1e9
        );
    }
}
