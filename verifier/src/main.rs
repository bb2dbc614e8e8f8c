fn main() {
    eprintln!("kverify: no subcommands yet");
    std::process::exit(2);
}
