! Reads the gravitational constant used by the Roe shallow-water Riemann solvers
! (common block /cparam/) from setprob.data.
subroutine setprob()
    implicit none
    real(kind=8) :: grav
    common /cparam/ grav
    integer, parameter :: iunit = 7

    call opendatafile(iunit, 'setprob.data')
    read(iunit, *) grav
    close(iunit)
end subroutine setprob
