use crate::Global;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

pub fn run(_g: &Global, _a: Args) -> anyhow::Result<()> {
    Err(leapgnn::NotImplemented.into())
}
