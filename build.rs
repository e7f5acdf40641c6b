//! Compiles `proto/pulumirpc.proto` (the resource-monitor subset keel
//! serves) and `proto/provider.proto` (the resource-provider subset keel
//! drives as a client), and `proto/hooks.proto` (transform and hook
//! callback payloads) with protox, a pure-Rust protobuf compiler: no
//! system `protoc`. All are package `pulumirpc`, so they generate one
//! module. Only with the `grpc` feature; without it there is nothing to
//! build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "grpc")]
    {
        println!("cargo:rerun-if-changed=proto/pulumirpc.proto");
        println!("cargo:rerun-if-changed=proto/provider.proto");
        println!("cargo:rerun-if-changed=proto/hooks.proto");
        let fds = protox::compile(
            ["pulumirpc.proto", "provider.proto", "hooks.proto"],
            ["proto"],
        )?;
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .compile_fds(fds)?;
    }
    Ok(())
}
