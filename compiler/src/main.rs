fn main() {
    eprintln!("tilec: not built yet");
    std::process::exit(2);
}
