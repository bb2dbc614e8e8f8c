fn main() {
    lalrpop::Configuration::new()
        .set_in_dir("src").set_out_dir(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .emit_rerun_directives(true)
        .process()
        .expect("lalrpop grammar generation failed");
}
